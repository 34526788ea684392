#include "tokenizer/tokenizer_json.h"

#include "core/error.h"

namespace kestrel {
namespace {

using nlohmann::json;

// A DOM builder (the same scheme as nlohmann's own) with two diverted subtrees.
class Reader : public nlohmann::json_sax<json> {
 public:
  explicit Reader(TokenizerJson& out) : out_(out) {}

  const std::string& error() const { return error_; }

  bool null() override { return value(nullptr); }
  bool boolean(bool v) override { return value(v); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::kVocab) return vocab_id(v);
    return value(v);
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::kVocab) return vocab_id(static_cast<int64_t>(std::min<uint64_t>(v, 1ull << 40)));
    return value(v);
  }
  bool number_float(number_float_t v, const string_t&) override { return value(v); }
  bool binary(binary_t& v) override { return value(std::move(v)); }

  bool string(string_t& s) override {
    if (mode_ == Mode::kMerges) {
      const size_t space = s.find(' ');
      if (space == std::string::npos) return fail("merge #" + rank() + " \"" + s + "\" is not \"a b\"");
      out_.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      return true;
    }
    if (mode_ == Mode::kMergePair) {
      pair_.push_back(std::move(s));
      return true;
    }
    return value(std::move(s));
  }

  bool key(string_t& k) override {
    if (mode_ == Mode::kVocab) {
      key_ = std::move(k);
      return true;
    }
    key_ = k;
    slot_ = &(*stack_.back())[k];
    return true;
  }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::kDom) return fail("vocab entry \"" + key_ + "\" has no valid id");
    if (at_model_member("vocab")) {
      *slot_ = json::object();
      out_.has_vocab = true;
      mode_ = Mode::kVocab;
      return true;
    }
    return open(json::value_t::object);
  }
  bool end_object() override {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
      return true;
    }
    close();
    return true;
  }

  bool start_array(std::size_t) override {
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kMergePair;
      pair_.clear();
      return true;
    }
    if (mode_ != Mode::kDom) return fail(mode_ == Mode::kVocab ? "vocab entry \"" + key_ +
                                                                     "\" has no valid id"
                                                               : "merge #" + rank() +
                                                                     " is neither \"a b\" nor "
                                                                     "[\"a\", \"b\"]");
    if (at_model_member("merges")) {
      *slot_ = json::array();
      out_.has_merges = true;
      mode_ = Mode::kMerges;
      return true;
    }
    return open(json::value_t::array);
  }
  bool end_array() override {
    if (mode_ == Mode::kMergePair) {
      if (pair_.size() != 2) return fail("merge #" + rank() + " is neither \"a b\" nor [\"a\", \"b\"]");
      out_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      mode_ = Mode::kMerges;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kDom;
      return true;
    }
    close();
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    return fail("not valid JSON at byte " + std::to_string(position) + ": " + e.what());
  }

 private:
  enum class Mode { kDom, kVocab, kMerges, kMergePair };

  bool fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }
  std::string rank() const { return std::to_string(out_.merges.size()); }

  bool vocab_id(int64_t v) {
    if (v < 0 || v >= (int64_t(1) << 31)) return fail("vocab entry \"" + key_ + "\" has no valid id");
    out_.vocab.emplace_back(std::move(key_), v);
    return true;
  }

  // True when the next value is root["model"][member].
  bool at_model_member(const char* member) const {
    return stack_.size() == 2 && path_[1] == "model" && stack_.back()->is_object() && key_ == member;
  }

  template <typename V>
  json* place(V&& v) {
    if (stack_.empty()) {
      out_.root = json(std::forward<V>(v));
      return &out_.root;
    }
    if (stack_.back()->is_array()) {
      stack_.back()->emplace_back(std::forward<V>(v));
      return &stack_.back()->back();
    }
    *slot_ = json(std::forward<V>(v));
    return slot_;
  }
  template <typename V>
  bool value(V&& v) {
    if (mode_ == Mode::kVocab) return fail("vocab entry \"" + key_ + "\" has no valid id");
    if (mode_ != Mode::kDom) return fail("merge #" + rank() + " is neither \"a b\" nor [\"a\", \"b\"]");
    place(std::forward<V>(v));
    return true;
  }
  bool open(json::value_t type) {
    const bool in_object = !stack_.empty() && stack_.back()->is_object();
    path_.push_back(in_object ? key_ : std::string());
    stack_.push_back(place(type));
    return true;
  }
  void close() {
    stack_.pop_back();
    path_.pop_back();
  }

  TokenizerJson& out_;
  std::vector<json*> stack_;       // open containers
  std::vector<std::string> path_;  // key under which each open container sits
  json* slot_ = nullptr;           // where the value after a key goes
  std::string key_;
  std::vector<std::string> pair_;
  Mode mode_ = Mode::kDom;
  std::string error_;
};

}  // namespace

TokenizerJson parse_tokenizer_json(std::string_view text) {
  TokenizerJson out;
  Reader reader(out);
  const bool ok = json::sax_parse(text.begin(), text.end(), &reader);
  if (!ok) throw_error("{}", reader.error().empty() ? "not valid JSON" : reader.error());
  return out;
}

}  // namespace kestrel
