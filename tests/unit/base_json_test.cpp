// tidal/base/json.h and checked_math.h: what files from strangers may not do to the parsers.
#include "tidal/base/json.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "tests/support/error_of.h"
#include "tidal/base/checked_math.h"

namespace tidal {
namespace {

using testing::error_of;

TEST(Json, DeepNestingIsRefusedBeforeParsing) {
  std::string deep(100000, '[');
  std::string msg = error_of([&] { parse_json(deep, "x.json"); });
  EXPECT_NE(msg.find("x.json is nested more than 512 levels deep"), std::string::npos) << msg;
  // Brackets inside strings do not count; the limit itself is allowed.
  std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_EQ(parse_json(ok, "ok.json").size(), 1u);
  EXPECT_EQ(parse_json("{\"a\": \"" + std::string(1000, '[') + "\"}", "s.json")["a"].get<std::string>().size(), 1000u);
  // An escaped quote does not end the string.
  EXPECT_EQ(parse_json(R"({"a": "\"[[["})", "e.json")["a"].get<std::string>(), "\"[[[");
}

TEST(Json, SyntaxErrorsNameTheFileAndNeverEchoItsContents) {
  std::string msg = error_of([] { parse_json("root:x:0:0:root:/root:/bin/bash", "shard.json"); });
  EXPECT_NE(msg.find("shard.json is not valid JSON (syntax error near byte"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("root"), std::string::npos) << msg;
}

TEST(Json, FieldsAreReadByTypeWithoutWrappingOrEchoing) {
  auto j = parse_json(R"({"i": 3, "big": 18446744073709551615, "f": 1.5, "s": "secret", "b": true, "n": null,
                          "a": [1, 2, 3]})",
                      "c.json");
  EXPECT_EQ(json_int(j["i"], "c.json field 'i'"), 3);
  EXPECT_NE(error_of([&] { json_int(j["big"], "c.json field 'big'"); }).find("too large for a 64-bit integer"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { json_int(j["f"], "c.json field 'f'"); }),
            "c.json field 'f' must be an integer, found a fractional number");
  std::string msg = error_of([&] { json_number(j["s"], "c.json field 's'"); });
  EXPECT_EQ(msg, "c.json field 's' must be a number, found a string");
  EXPECT_EQ(json_number(j["i"], "i"), 3.0);
  EXPECT_TRUE(json_bool(j["b"], "b"));
  EXPECT_EQ(json_string(j["s"], "s"), "secret");
  EXPECT_EQ(json_int_array(j["a"], "a", 3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_NE(error_of([&] { json_int_array(j["a"], "a", 2); }).find("more than the 2 allowed"), std::string::npos);
  EXPECT_EQ(json_find(j, "n", "c.json"), nullptr);
  EXPECT_EQ(json_find(j, "missing", "c.json"), nullptr);
  EXPECT_NE(json_find(j, "i", "c.json"), nullptr);
  EXPECT_EQ(error_of([&] { json_find(j["a"], "x", "c.json"); }), "c.json must be a JSON object, found an array");
}

TEST(CheckedMath, OverflowAndNegativeSizesAreErrors) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(checked_mul(1 << 20, 1 << 20, "m"), int64_t(1) << 40);
  EXPECT_NE(error_of([&] {
              checked_mul(int64_t(1) << 56, 4 * 64, "[config] weight");
            }).find("[config] weight: 72057594037927936 x 256 overflows a 64-bit size"),
            std::string::npos);
  EXPECT_NE(error_of([&] { checked_add(big, 1, "id"); }).find("overflows"), std::string::npos);
  EXPECT_NE(error_of([&] { checked_mul(-3, 2, "dims"); }).find("size -3 is negative"), std::string::npos);
  const int64_t dims[] = {16777216, 1099511627775, 768};
  EXPECT_NE(error_of([&] { checked_product(dims, "activations"); }).find("overflows"), std::string::npos);
  const int64_t ok[] = {2, 3, 4};
  EXPECT_EQ(checked_product(ok, "x"), 24);
  EXPECT_EQ(checked_bytes(10, 4, "x"), 40);
}

}  // namespace
}  // namespace tidal
