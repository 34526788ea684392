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
  const void* data = nullptr;  // inside the mapping
  size_t nbytes = 0;
  std::string file;            // the file it lives in, for error messages
  // A host Tensor viewing the mapped bytes (read-only; do not write through it).
  Tensor view() const;
};

// One memory-mapped .safetensors file. Throws kestrel::Error naming the file and the
// problem: missing, truncated, header length or offsets out of bounds, malformed JSON,
// unknown dtype, shape and byte size that disagree.
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

// All weights of a model directory: model.safetensors, or the shards listed in
// model.safetensors.index.json ("weight_map": name -> file).
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
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace kestrel
