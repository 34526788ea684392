// Reading and writing safetensors files, memory-mapped.
//
// Format: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data. Offsets are relative to the end of the header.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kestrel {

struct TensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
  // Inside the mapping, valid while the SafetensorsFile (or WeightStore) lives. 8-byte
  // aligned in files whose writer pads the header (the reference writer and ours do); other
  // files may leave it unaligned, so copy rather than cast to wider types there.
  const void* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // the file it lives in, for error messages
  // A host Tensor viewing the mapped bytes (read-only; do not write through it).
  Tensor view() const;
};

// One memory-mapped .safetensors file. Throws kestrel::Error naming the file and the
// problem: missing, truncated, header length or offsets out of bounds, malformed JSON,
// unknown dtype, shape and byte size that disagree, tensors that overlap or leave gaps or
// trailing bytes (as the reference implementation, the tensors must tile the data section),
// more than Shape::kMaxDims dimensions. Immutable once open: safe to read from any thread.
class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
};

// All weights of a model directory: the shards listed in model.safetensors.index.json
// ("weight_map": name -> file) when it exists, else model.safetensors, else every
// *.safetensors file in the directory. Copies and moves share the mapped files; the
// TensorInfo references stay valid while any copy lives. Immutable once open.
class WeightStore {
 public:
  // Throws kestrel::Error when no weights are found or a file is bad.
  static WeightStore open(const std::string& model_dir);
  bool has(const std::string& name) const;
  // Throws kestrel::Error "missing tensor '<name>' in <dir>".
  const TensorInfo& get(const std::string& name) const;
  // get() plus a shape check; throws naming the tensor, the expected and the found shape.
  const TensorInfo& get(const std::string& name, const Shape& expected) const;
  std::vector<std::string> names() const;

 private:
  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> index_;
};

// Writes `tensors` (host tensors) in order to `path`, with optional string metadata.
// The header is padded with spaces to a multiple of 8 bytes, as the reference writer does.
// Throws kestrel::Error when the file cannot be written or a name repeats.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// For writers that stream tensors one at a time (too large to hold together): the bytes of
// the length prefix and header for tensors laid out back to back in the given order. Each
// tensor's data must then follow in that order, dtype_size(dtype) * shape.numel() bytes.
struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
};
std::string safetensors_header(const std::vector<SafetensorsEntry>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

}  // namespace kestrel
