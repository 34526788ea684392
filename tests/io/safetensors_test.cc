// safetensors reading and writing: round trips checked against the data written, files made
// by the reference (Rust) writer through transformers, sharded directories, and every kind
// of broken file with the message it must produce.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io_test_util.h"

namespace kestrel {
namespace {

// A file made byte by byte: little-endian length, header text, data.
void write_raw(const std::string& path, const std::string& header, const std::string& data,
               uint64_t length_field) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(length_field >> (8 * i)));
  out << header << data;
}
void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  write_raw(path, header, data, header.size());
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(Safetensors, RoundTripF32Bf16F16) {
  TempDir dir;
  const std::string path = dir.path() + "/t.safetensors";
  // Hand-picked values; bf16/f16 given as bit patterns with known meaning.
  Tensor f32 = Tensor::host(DType::kF32, Shape{2, 3});
  const float f32_vals[] = {1.5f, -2.25f, 3.0e-3f, 7.0f, -0.125f, 1e6f};
  std::memcpy(f32.data(), f32_vals, sizeof(f32_vals));
  Tensor bf16 = Tensor::host(DType::kBF16, Shape{3});
  const uint16_t bf16_bits[] = {0x3FC0, 0xC010, 0x4049};  // 1.5, -2.25, 3.140625
  std::memcpy(bf16.data(), bf16_bits, sizeof(bf16_bits));
  Tensor f16 = Tensor::host(DType::kF16, Shape{1, 1, 2, 2});
  const uint16_t f16_bits[] = {0x3E00, 0xC100, 0x3555, 0x7BFF};  // 1.5, -2.5, ~0.3333, 65504
  std::memcpy(f16.data(), f16_bits, sizeof(f16_bits));

  write_safetensors(path, {{"b.f32", f32}, {"a.bf16", bf16}, {"c.f16", f16}}, {{"format", "pt"}});

  // The layout, read without the code under test.
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ(n % 8, 0u) << "header must be padded to 8 bytes";
  EXPECT_EQ(bytes.size(), 8 + n + 24 + 6 + 8);
  auto header = nlohmann::json::parse(bytes.substr(8, n));  // trailing spaces are legal JSON
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(header["b.f32"]["data_offsets"], nlohmann::json({0, 24}));  // in the given order
  EXPECT_EQ(header["a.bf16"]["data_offsets"], nlohmann::json({24, 30}));
  EXPECT_EQ(header["c.f16"]["data_offsets"], nlohmann::json({30, 38}));
  EXPECT_EQ(header["c.f16"]["shape"], nlohmann::json({1, 1, 2, 2}));
  EXPECT_EQ(header["a.bf16"]["dtype"], "BF16");

  auto file = SafetensorsFile::open(path);
  ASSERT_EQ(file->tensors().size(), 3u);
  const TensorInfo& a = file->tensors().at("b.f32");
  EXPECT_EQ(a.dtype, DType::kF32);
  EXPECT_EQ(a.shape, (Shape{2, 3}));
  EXPECT_EQ(a.nbytes, 24u);
  EXPECT_EQ(a.file, path);
  EXPECT_EQ(std::memcmp(a.data, f32_vals, 24), 0);
  const TensorInfo& b = file->tensors().at("a.bf16");
  EXPECT_EQ(b.dtype, DType::kBF16);
  EXPECT_EQ(std::memcmp(b.data, bf16_bits, 6), 0);
  EXPECT_EQ(bf16_to_f32(static_cast<const uint16_t*>(b.data)[1]), -2.25f);
  const TensorInfo& c = file->tensors().at("c.f16");
  EXPECT_EQ(c.shape, (Shape{1, 1, 2, 2}));
  EXPECT_EQ(std::memcmp(c.data, f16_bits, 8), 0);
  EXPECT_EQ(f16_to_f32(static_cast<const uint16_t*>(c.data)[3]), 65504.0f);
  Tensor v = c.view();
  EXPECT_EQ(v.dtype(), DType::kF16);
  EXPECT_EQ(v.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(v.data(), c.data);
}

TEST(Safetensors, EmptyAndZeroSizedTensors) {
  TempDir dir;
  write_safetensors(dir.path() + "/e.safetensors", {});
  EXPECT_TRUE(SafetensorsFile::open(dir.path() + "/e.safetensors")->tensors().empty());
  Tensor empty = Tensor::host(DType::kF32, Shape{0, 4});
  Tensor one = Tensor::host(DType::kI32, Shape{1});
  *one.data_as<int32_t>() = 42;
  write_safetensors(dir.path() + "/z.safetensors", {{"empty", empty}, {"one", one}});
  auto f = SafetensorsFile::open(dir.path() + "/z.safetensors");
  EXPECT_EQ(f->tensors().at("empty").nbytes, 0u);
  EXPECT_EQ(*static_cast<const int32_t*>(f->tensors().at("one").data), 42);
}

TEST(WeightStore, ShardedIndex) {
  TempDir dir;
  Tensor x = Tensor::host(DType::kF32, Shape{2});
  x.data_as<float>()[0] = 3.5f;
  x.data_as<float>()[1] = -1.0f;
  Tensor y = Tensor::host(DType::kBF16, Shape{4, 1});
  y.data_as<uint16_t>()[2] = 0x3F80;  // 1.0
  write_safetensors(dir.path() + "/model-00001-of-00002.safetensors", {{"x", x}});
  write_safetensors(dir.path() + "/model-00002-of-00002.safetensors", {{"y", y}});
  write_text(dir.path() + "/model.safetensors.index.json",
             R"({"metadata": {"total_size": 16}, "weight_map": {
                  "x": "model-00001-of-00002.safetensors",
                  "y": "model-00002-of-00002.safetensors"}})");
  WeightStore store = WeightStore::open(dir.path());
  EXPECT_EQ(store.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(store.has("x"));
  EXPECT_FALSE(store.has("z"));
  EXPECT_EQ(store.get("x").file, dir.path() + "/model-00001-of-00002.safetensors");
  EXPECT_EQ(static_cast<const float*>(store.get("x", Shape{2}).data)[0], 3.5f);
  EXPECT_EQ(store.get("y").file, dir.path() + "/model-00002-of-00002.safetensors");
  EXPECT_EQ(bf16_to_f32(static_cast<const uint16_t*>(store.get("y", Shape{4, 1}).data)[2]), 1.0f);

  // A store outlives moves of itself: the index points into heap-held files.
  WeightStore moved = std::move(store);
  EXPECT_EQ(static_cast<const float*>(moved.get("x").data)[1], -1.0f);

  // The index says y is in shard 1, which does not hold it.
  write_text(dir.path() + "/model.safetensors.index.json",
             R"({"weight_map": {"x": "model-00001-of-00002.safetensors",
                                "y": "model-00001-of-00002.safetensors"}})");
  expect_error([&] { WeightStore::open(dir.path()); },
               {"tensor 'y'", "model-00001-of-00002.safetensors", "does not hold it"});
  write_text(dir.path() + "/model.safetensors.index.json",
             R"({"weight_map": {"x": "model-00009-of-00009.safetensors"}})");
  expect_error([&] { WeightStore::open(dir.path()); },
               {"model-00009-of-00009.safetensors", "does not exist"});
  write_text(dir.path() + "/model.safetensors.index.json", R"({"weight_map": {"x": "../x"}})");
  expect_error([&] { WeightStore::open(dir.path()); }, {"invalid file '../x'"});
}

TEST(WeightStore, FallbackToAllSafetensorsAndDuplicates) {
  TempDir dir;
  Tensor x = Tensor::host(DType::kF32, Shape{1});
  x.data_as<float>()[0] = 2.0f;
  write_safetensors(dir.path() + "/a.safetensors", {{"x", x}});
  write_safetensors(dir.path() + "/b.safetensors", {{"y", x}});
  WeightStore store = WeightStore::open(dir.path());
  EXPECT_EQ(store.names(), (std::vector<std::string>{"x", "y"}));
  write_safetensors(dir.path() + "/c.safetensors", {{"x", x}});
  expect_error([&] { WeightStore::open(dir.path()); },
               {"tensor 'x' appears in both", "a.safetensors", "c.safetensors"});
}

TEST(WeightStore, MissingThings) {
  TempDir dir;
  expect_error([&] { WeightStore::open(dir.path() + "/nope"); }, {"does not exist", "nope"});
  expect_error([&] { WeightStore::open(dir.path()); }, {"no weights in", dir.path()});
  expect_error([&] { SafetensorsFile::open(dir.path() + "/absent.safetensors"); },
               {"cannot open", "absent.safetensors"});
  Tensor x = Tensor::host(DType::kF32, Shape{2, 3});
  x.data_as<float>()[0] = 1.0f;
  write_safetensors(dir.path() + "/model.safetensors", {{"w", x}});
  WeightStore store = WeightStore::open(dir.path());
  expect_error([&] { store.get("lm_head.weight"); },
               {"missing tensor 'lm_head.weight' in " + dir.path()});
  expect_error(
      [&] {
        store.get("w", Shape{3, 2});
      },
      {"tensor 'w'", "has shape [2, 3]", "expected [3, 2]"});
}

// Every class of broken file: each message names the file and the problem.
class BadFile : public ::testing::Test {
 protected:
  void expect_bad(const std::string& header, const std::string& data,
                  std::initializer_list<std::string> parts) {
    write_raw(path_, header, data);
    expect_bad_file(parts);
  }
  void expect_bad_file(std::initializer_list<std::string> parts) {
    try {
      SafetensorsFile::open(path_);
      ADD_FAILURE() << "expected kestrel::Error";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(path_), std::string::npos) << msg;
      for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg << " / " << p;
    }
  }
  TempDir dir_;
  std::string path_ = dir_.path() + "/bad.safetensors";
};

TEST_F(BadFile, Truncated) {
  write_text(path_, std::string("\x10\x00\x00", 3));
  expect_bad_file({"truncated", "3 bytes"});
  write_text(path_, "");
  expect_bad_file({"truncated", "0 bytes"});
  // A good file cut short loses the end of its data.
  Tensor x = Tensor::host(DType::kF32, Shape{4});
  x.data_as<float>()[0] = 1.0f;
  write_safetensors(path_, {{"x", x}});
  std::string bytes = read_bytes(path_);
  write_text(path_, bytes.substr(0, bytes.size() - 4));
  expect_bad_file({"tensor 'x'", "out of bounds"});
}

TEST_F(BadFile, HeaderLengthOutOfBounds) {
  write_raw(path_, "{}      ", "", 1000);
  expect_bad_file({"header length 1000 is out of bounds"});
  write_raw(path_, "{}", "", ~uint64_t{0});
  expect_bad_file({"header length 18446744073709551615 is out of bounds"});
}

TEST_F(BadFile, MalformedJson) {
  expect_bad(R"({"x": {"dtype": "F32", )", "", {"malformed JSON header"});
  expect_bad(R"([1, 2])", "", {"must be an object"});
}

TEST_F(BadFile, BadEntries) {
  const std::string four(4, '\x01');
  expect_bad(R"({"x": [1]})", four, {"tensor 'x'", "must be an object"});
  expect_bad(R"({"x": {"dtype": "F8_E5M2", "shape": [4], "data_offsets": [0, 4]}})", four,
             {"tensor 'x'", "unsupported dtype 'F8_E5M2'"});
  expect_bad(R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", four,
             {"tensor 'x'", "negative dimension"});
  expect_bad(R"({"x": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", four,
             {"tensor 'x'", "non-integer dimension"});
  expect_bad(R"({"x": {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}})", four,
             {"tensor 'x'", "\"shape\" must be a list"});
  expect_bad(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", four,
             {"tensor 'x'", "begin > end"});
  expect_bad(R"({"x": {"dtype": "F32", "shape": [1]}})", four, {"tensor 'x'", "data_offsets"});
  expect_bad(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", four,
             {"tensor 'x'", "hold 4 bytes", "needs 8"});
  expect_bad(R"({"x": {"dtype": "U8", "shape": [1,1,1,1,4], "data_offsets": [0, 4]}})", four,
             {"tensor 'x'", "5 dimensions"});
}

TEST_F(BadFile, OffsetsOutOfBoundsOverlapGapTrailing) {
  expect_bad(R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
             std::string(8, '\x01'), {"tensor 'x'", "out of bounds", "8 bytes"});
  expect_bad(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                 "y": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
             std::string(8, '\x01'), {"tensor 'y'", "overlap"});
  expect_bad(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
             std::string(8, '\x01'), {"tensor 'x'", "gap"});
  expect_bad(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
             std::string(8, '\x01'), {"trailing bytes"});
}

}  // namespace
}  // namespace kestrel
