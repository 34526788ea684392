#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace kestrel {
namespace {

// The reference implementation refuses headers above 100 MB; a larger one is a broken file,
// and refusing it early keeps a corrupt length from making us parse gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

Shape make_shape(const std::vector<int64_t>& dims) {
  switch (dims.size()) {
    case 0:
      return Shape{};
    case 1:
      return Shape{dims[0]};
    case 2:
      return Shape{dims[0], dims[1]};
    case 3:
      return Shape{dims[0], dims[1], dims[2]};
    case 4:
      return Shape{dims[0], dims[1], dims[2], dims[3]};
  }
  KS_ASSERT(false, "make_shape: {} dims", dims.size());
  return Shape{};
}

std::vector<int64_t> parse_shape(const nlohmann::json& j, const std::string& file,
                                 const std::string& name) {
  KS_CHECK(j.is_array(), "{}: tensor '{}': \"shape\" must be a list of integers, got {}", file,
           name, j.dump());
  KS_CHECK(j.size() <= static_cast<size_t>(Shape::kMaxDims),
           "{}: tensor '{}': {} dimensions (at most {} are supported)", file, name, j.size(),
           Shape::kMaxDims);
  std::vector<int64_t> dims;
  for (const auto& d : j) {
    KS_CHECK(d.is_number_integer(), "{}: tensor '{}': shape {} has a non-integer dimension", file,
             name, j.dump());
    KS_CHECK(d.is_number_unsigned() || d.get<int64_t>() >= 0,
             "{}: tensor '{}': shape {} has a negative dimension", file, name, j.dump());
    uint64_t v = d.get<uint64_t>();
    KS_CHECK(v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
             "{}: tensor '{}': shape {} dimension too large", file, name, j.dump());
    dims.push_back(static_cast<int64_t>(v));
  }
  return dims;
}

// Bytes of `dims` x `elem`, or throws when it overflows 64 bits.
uint64_t checked_nbytes(const std::vector<int64_t>& dims, size_t elem, const std::string& file,
                        const std::string& name) {
  unsigned __int128 n = elem;
  for (int64_t d : dims) {
    n *= static_cast<uint64_t>(d);
    KS_CHECK(n <= std::numeric_limits<uint64_t>::max(), "{}: tensor '{}': size overflows", file,
             name);
  }
  return static_cast<uint64_t>(n);
}

struct RawEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> dims;
  uint64_t begin, end;
};

RawEntry parse_entry(const std::string& name, const nlohmann::json& e, const std::string& file) {
  KS_CHECK(e.is_object(), "{}: tensor '{}': header entry must be an object, got {}", file, name,
           e.dump());
  for (const char* key : {"dtype", "shape", "data_offsets"})
    KS_CHECK(e.contains(key), "{}: tensor '{}': header entry has no \"{}\"", file, name, key);
  KS_CHECK(e["dtype"].is_string(), "{}: tensor '{}': \"dtype\" must be a string", file, name);
  RawEntry r;
  r.name = name;
  try {
    r.dtype = parse_safetensors_dtype(e["dtype"].get<std::string>());
  } catch (const Error& err) {
    throw_error("{}: tensor '{}': {}", file, name, err.what());
  }
  r.dims = parse_shape(e["shape"], file, name);
  const auto& off = e["data_offsets"];
  bool ok = off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
            off[1].is_number_unsigned();
  KS_CHECK(ok, "{}: tensor '{}': \"data_offsets\" must be two non-negative integers, got {}", file,
           name, off.dump());
  r.begin = off[0].get<uint64_t>();
  r.end = off[1].get<uint64_t>();
  KS_CHECK(r.begin <= r.end, "{}: tensor '{}': data_offsets [{}, {}] begin > end", file, name,
           r.begin, r.end);
  uint64_t want = checked_nbytes(r.dims, dtype_size(r.dtype), file, name);
  KS_CHECK(r.end - r.begin == want,
           "{}: tensor '{}': data_offsets [{}, {}] hold {} bytes but {} {} needs {}", file, name,
           r.begin, r.end, r.end - r.begin, dtype_name(r.dtype), make_shape(r.dims).str(), want);
  return r;
}

}  // namespace

Tensor TensorInfo::view() const {
  return Tensor(const_cast<void*>(data), dtype, shape, Device::kCpu);
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  KS_CHECK(fd >= 0, "cannot open safetensors file {}: {}", path, std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw_error("cannot stat {}: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_error("{} is not a regular file", path);
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    throw_error("{}: truncated safetensors file ({} bytes, the 8-byte header length is missing)",
                path, size);
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  ::close(fd);  // the mapping stays valid without the descriptor
  KS_CHECK(map != MAP_FAILED, "cannot mmap {}: {}", path, std::strerror(map_errno));

  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->map_ = map;  // owned from here on: the destructor unmaps, also when parsing throws below
  f->map_size_ = size;

  const auto* bytes = static_cast<const uint8_t*>(map);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];  // little-endian
  KS_CHECK(header_len <= size - 8,
           "{}: header length {} is out of bounds (file has {} bytes; truncated or not a "
           "safetensors file)",
           path, header_len, size);
  KS_CHECK(header_len <= kMaxHeaderBytes, "{}: header length {} exceeds the {} byte limit", path,
           header_len, kMaxHeaderBytes);

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const nlohmann::json::parse_error& e) {
    throw_error("{}: malformed JSON header (at byte {} of the header): {}", path, e.byte, e.what());
  }
  KS_CHECK(header.is_object(), "{}: the JSON header must be an object", path);

  std::vector<RawEntry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      KS_CHECK(value.is_object(), "{}: \"__metadata__\" must be an object of strings", path);
      continue;
    }
    entries.push_back(parse_entry(name, value, path));
  }

  // As the reference implementation does: sorted by offset, the tensors must tile the data
  // section exactly, with no overlap, no gap and nothing after the last one.
  std::sort(entries.begin(), entries.end(), [](const RawEntry& a, const RawEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const uint64_t data_size = size - 8 - header_len;
  uint64_t expected_begin = 0;
  for (const RawEntry& r : entries) {
    KS_CHECK(r.end <= data_size,
             "{}: tensor '{}': data_offsets [{}, {}] out of bounds (data section has {} bytes; "
             "truncated file?)",
             path, r.name, r.begin, r.end, data_size);
    KS_CHECK(r.begin == expected_begin,
             "{}: tensor '{}': data_offsets [{}, {}] {} the previous tensor (expected begin {})",
             path, r.name, r.begin, r.end,
             r.begin < expected_begin ? "overlap" : "leave a gap after", expected_begin);
    expected_begin = r.end;
  }
  KS_CHECK(expected_begin == data_size,
           "{}: data section has {} bytes but the tensors cover only {} (trailing bytes)", path,
           data_size, expected_begin);

  const uint8_t* data = bytes + 8 + header_len;
  for (RawEntry& r : entries) {
    TensorInfo info;
    info.name = r.name;
    info.dtype = r.dtype;
    info.shape = make_shape(r.dims);
    info.data = data + r.begin;
    info.nbytes = static_cast<size_t>(r.end - r.begin);
    info.file = path;
    f->tensors_.emplace(r.name, std::move(info));
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

std::string safetensors_header(const std::vector<SafetensorsEntry>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorsEntry& t : tensors) {
    KS_CHECK(t.name != "__metadata__", "'__metadata__' is not a valid tensor name");
    KS_CHECK(!header.contains(t.name), "duplicate tensor '{}'", t.name);
    nlohmann::json shape = nlohmann::json::array();
    for (int i = 0; i < t.shape.ndim(); ++i) shape.push_back(t.shape[i]);
    const uint64_t nbytes = static_cast<uint64_t>(t.shape.numel()) * dtype_size(t.dtype);
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", shape},
                      {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text = header.dump();
  // Pad with spaces to a multiple of 8, as the reference writer does, so the data section
  // starts 8-byte aligned in the file.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  return out + text;
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsEntry> specs;
  for (const auto& [name, t] : tensors) {
    KS_CHECK(t.defined() && t.device() == Device::kCpu,
             "write_safetensors {}: tensor '{}' must be a defined host tensor", path, name);
    specs.push_back({name, t.dtype(), t.shape()});
  }
  std::string header;
  try {
    header = safetensors_header(specs, metadata);
  } catch (const Error& e) {
    throw_error("write_safetensors {}: {}", path, e.what());
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  KS_CHECK(out.good(), "cannot create {}: {}", path, std::strerror(errno));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& [name, t] : tensors)
    out.write(static_cast<const char*>(t.data()), static_cast<std::streamsize>(t.nbytes()));
  out.flush();
  KS_CHECK(out.good(), "error writing {}", path);
}

}  // namespace kestrel
