// parse_untrusted_json (core/json_parse.h): what it takes, in order, and where it stops:
// kMaxJsonKeyWork (the sum of each object's keys squared) and kMaxJsonDepth, counted as the
// text is read.
#include "core/json_parse.h"

#include <gtest/gtest.h>

#include <string>

namespace kestrel {
namespace {

// {"k0": 0, "k1": 1, ...}
std::string object_of(int keys) {
  std::string s = "{";
  for (int i = 0; i < keys; ++i) s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  return s + "}";
}

std::string limit_error(const std::string& text) {
  try {
    parse_untrusted_json(text);
  } catch (const JsonLimitError& e) {
    return e.what();
  }
  return "";
}

TEST(JsonParse, KeepsOrderAndValues) {
  const auto j = parse_untrusted_json(R"({"b": [1, {"z": null, "a": "x"}], "a": 2.5})");
  EXPECT_EQ(j.dump(), R"({"b":[1,{"z":null,"a":"x"}],"a":2.5})");
  EXPECT_THROW(parse_untrusted_json("{\"a\": }"), nlohmann::json::exception);
}

TEST(JsonParse, OneObjectOfTwentyThousandKeysAndNoMore) {
  EXPECT_EQ(parse_untrusted_json(object_of(20000)).size(), 20000u);
  const std::string e = limit_error(object_of(20001));
  EXPECT_NE(e.find("has objects of too many keys (20001 in one"), std::string::npos) << e;
}

TEST(JsonParse, TheKeysOfSeveralObjectsCountTogether) {
  // 15,000^2 twice passes 20,000^2; a hundred thousand small objects do not come near it.
  const std::string two = "[" + object_of(15000) + "," + object_of(15000) + "]";
  EXPECT_NE(limit_error(two).find("too many keys"), std::string::npos);
  std::string many = "[";
  for (int i = 0; i < 100000; ++i) many += (i ? "," : "") + std::string("{\"a\":1,\"b\":2}");
  many += "]";
  EXPECT_EQ(parse_untrusted_json(many).size(), 100000u);
}

// Levels as nlohmann counts them, from 0 at the outermost value: 65 arrays in one another
// reach level 64.
TEST(JsonParse, NestingUpToLevel64) {
  auto nested = [](int arrays) { return std::string(arrays, '[') + std::string(arrays, ']'); };
  EXPECT_NO_THROW(parse_untrusted_json(nested(65)));
  EXPECT_EQ(limit_error(nested(66)), "is nested deeper than 64 levels");
}

}  // namespace
}  // namespace kestrel
