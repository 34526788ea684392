// The `normalizer` of a tokenizer.json: null, a Unicode normalization form (NFC, NFD, NFKC,
// NFKD, through utf8proc) or a Sequence of them. Other types fail at load.
//
// Thread safety: immutable after construction.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel {

class Normalizer {
 public:
  enum class Form { kNFC, kNFD, kNFKC, kNFKD };

  Normalizer() = default;
  explicit Normalizer(std::vector<Form> forms) : forms_(std::move(forms)) {}

  // Parses the "normalizer" value; throws kestrel::Error naming an unsupported type.
  static Normalizer from_json(const nlohmann::json& j);

  bool empty() const { return forms_.empty(); }

  // Returns `text` normalized. The result is either `text` itself (when nothing changes, the
  // common case, detected without calling utf8proc) or a view of `scratch`.
  // REQUIRES: text is valid UTF-8.
  std::string_view normalize(std::string_view text, std::string& scratch) const;

 private:
  std::vector<Form> forms_;
};

}  // namespace kestrel
