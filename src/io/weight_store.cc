// WeightStore: the safetensors files of one model directory behind one name index.
#include <algorithm>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "io/model_config.h"
#include "io/safetensors.h"

namespace kestrel {

namespace fs = std::filesystem;

WeightStore WeightStore::open(const std::string& model_dir) {
  KS_CHECK(fs::is_directory(model_dir), "model directory {} does not exist", model_dir);
  WeightStore store;
  store.dir_ = model_dir;

  auto add_file = [&store](const std::string& path) -> SafetensorsFile& {
    store.files_.push_back(SafetensorsFile::open(path));
    SafetensorsFile& f = *store.files_.back();
    for (const auto& [name, info] : f.tensors()) {
      auto [it, inserted] = store.index_.emplace(name, &info);
      KS_CHECK(inserted, "tensor '{}' appears in both {} and {}", name, it->second->file, path);
    }
    return f;
  };

  const fs::path dir(model_dir);
  const fs::path index_path = dir / "model.safetensors.index.json";
  const fs::path single_path = dir / "model.safetensors";
  if (fs::exists(index_path)) {
    nlohmann::json index = read_json_file(index_path.string());
    KS_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
             "{}: missing \"weight_map\" object", index_path.string());
    const auto& weight_map = index["weight_map"];
    std::set<std::string> shards;  // sorted: files open in a stable order
    for (const auto& [name, file] : weight_map.items()) {
      KS_CHECK(file.is_string(), "{}: weight_map entry '{}' is not a file name",
               index_path.string(), name);
      std::string shard = file.get<std::string>();
      // A shard name is a file in this directory, never a path that leaves it.
      KS_CHECK(!shard.empty() && shard.find('/') == std::string::npos && shard != "..",
               "{}: weight_map entry '{}' names an invalid file '{}'", index_path.string(), name,
               shard);
      shards.insert(shard);
    }
    KS_CHECK(!shards.empty(), "{}: weight_map is empty", index_path.string());
    for (const auto& shard : shards) {
      const fs::path p = dir / shard;
      KS_CHECK(fs::exists(p), "{}: shard {} listed in the index does not exist",
               index_path.string(), p.string());
      add_file(p.string());
    }
    for (const auto& [name, file] : weight_map.items()) {
      auto it = store.index_.find(name);
      std::string want = (dir / file.get<std::string>()).string();
      KS_CHECK(it != store.index_.end() && it->second->file == want,
               "{}: tensor '{}' is listed in {} but that file does not hold it",
               index_path.string(), name, want);
    }
  } else if (fs::exists(single_path)) {
    add_file(single_path.string());
  } else {
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".safetensors")
        found.push_back(e.path().string());
    std::sort(found.begin(), found.end());
    KS_CHECK(!found.empty(),
             "no weights in {}: expected model.safetensors, model.safetensors.index.json or "
             "*.safetensors",
             model_dir);
    for (const auto& p : found) add_file(p);
  }
  return store;
}

bool WeightStore::has(const std::string& name) const { return index_.count(name) != 0; }

const TensorInfo& WeightStore::get(const std::string& name) const {
  auto it = index_.find(name);
  KS_CHECK(it != index_.end(), "missing tensor '{}' in {}", name, dir_);
  return *it->second;
}

const TensorInfo& WeightStore::get(const std::string& name, const Shape& expected) const {
  const TensorInfo& t = get(name);
  KS_CHECK(t.shape == expected, "tensor '{}' in {} has shape {}, expected {}", name, t.file,
           t.shape.str(), expected.str());
  return t;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, info] : index_) out.push_back(name);
  return out;
}

}  // namespace kestrel
