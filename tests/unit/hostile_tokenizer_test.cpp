// tokenizer.json from strangers: ids bounded before the id table is sized, every field read by its JSON
// kind, Sequence walks bounded in depth, and errors that name the file and the field but never echo a
// token, a pattern or a value.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/error_of.h"
#include "tests/unit/data_test_util.h"
#include "tidal/data/tokenizer.h"

namespace tidal::data {
namespace {

using json = nlohmann::json;
using tidal::testing::error_of;

#define EXPECT_HAS(msg, fragment) EXPECT_NE((msg).find(fragment), std::string::npos) << (msg)

json base() {
  return json::parse(testing::make_tokenizer_json({{"h", "e"}}, {"<|endoftext|>"}, testing::kGpt2PreTokenizer));
}

std::string load_error(const json& j) {
  return error_of([&] { Tokenizer::from_json_string(j.dump(), "t.json"); });
}

TEST(HostileTokenizer, AnAddedTokenIdThatWouldOverflowIsRefused) {
  json j = base();
  j["added_tokens"][0]["id"] = int64_t(9223372036854775807);  // id + 1 overflowed and sized the table
  EXPECT_EQ(load_error(j),
            "[tokenizer] t.json field 'added_tokens[0].id' is 9223372036854775807: token ids must be in [0, 16777216) "
            "(tidal's limit, far above any published vocabulary: docs/reliability.md)");
  j["added_tokens"][0]["id"] = -1;
  EXPECT_HAS(load_error(j), "field 'added_tokens[0].id' is -1: token ids must be in [0, 16777216)");
}

TEST(HostileTokenizer, ASmallFileCannotAskForAHugeIdTable) {
  json j = base();
  j["model"]["vocab"]["he"] = 100000000;  // 1e8: a 6 GB table from a 13 KB file
  EXPECT_HAS(load_error(j), "[tokenizer] t.json: an id in field 'model.vocab' is 100000000: token ids must be in");
  j["model"]["vocab"]["he"] = 10000000;  // within the limit, but 258 tokens cannot use ten million ids
  EXPECT_HAS(load_error(j),
             "[tokenizer] t.json: the largest token id is 10000000 but there are only 259 tokens: more "
             "than 65536 ids would be unused");
  j["model"]["vocab"]["he"] = 60000;  // a vocabulary with holes, within the allowance, loads
  j["added_tokens"][0]["id"] = 60001;
  EXPECT_EQ(Tokenizer::from_json_string(j.dump(), "t.json").vocab_size(), 60002);
}

TEST(HostileTokenizer, FieldsOfTheWrongKindNameTheField) {
  json j = base();
  j["model"]["vocab"]["he"] = "256";
  EXPECT_EQ(load_error(j), "[tokenizer] t.json: an id in field 'model.vocab' must be an integer, found a string");
  j = base();
  j["added_tokens"][0]["content"] = 7;
  EXPECT_EQ(load_error(j), "[tokenizer] t.json field 'added_tokens[0].content' must be a string, found an integer");
  j = base();
  j["added_tokens"][0]["special"] = "yes";
  EXPECT_EQ(load_error(j), "[tokenizer] t.json field 'added_tokens[0].special' must be true or false, found a string");
  j = base();
  j["model"]["merges"][0] = 12;
  EXPECT_EQ(load_error(j),
            "[tokenizer] t.json field 'model.merges[0]' must be \"a b\" or [\"a\", \"b\"], found an "
            "integer");
  j["model"]["merges"][0] = json::array({"h", 5});
  EXPECT_EQ(load_error(j), "[tokenizer] t.json field 'model.merges[0]'[1] must be a string, found an integer");
  j = base();
  j["pre_tokenizer"]["type"] = 3;
  EXPECT_EQ(load_error(j), "[tokenizer] t.json field 'pre_tokenizer.type' must be a string, found an integer");
  j = base();
  j["model"]["vocab"] = json::array();
  EXPECT_EQ(load_error(j), "[tokenizer] t.json field 'model.vocab' must be an object of token -> id, found an array");
}

TEST(HostileTokenizer, TokensAndPatternsAreNeverEchoed) {
  json j = base();
  j["model"]["merges"][0] = "root:x:0:0 secret";
  std::string msg = load_error(j);
  EXPECT_HAS(msg, "field 'model.merges[0]': its first part is not in the vocabulary");
  EXPECT_EQ(msg.find("root"), std::string::npos) << msg;
  j = base();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "(secret"}}}}, json::parse(testing::kGpt2PreTokenizer)}}};
  msg = load_error(j);
  EXPECT_HAS(msg, "field 'pre_tokenizer.pretokenizers[0].pattern.Regex' does not compile: ");
  EXPECT_EQ(msg.find("secret"), std::string::npos) << msg;
  j = base();
  j["normalizer"] = {{"type", "secret-normalizer"}};
  msg = load_error(j);
  EXPECT_HAS(msg, "field 'normalizer' is a normalizer tidal does not support");
  EXPECT_EQ(msg.find("secret"), std::string::npos) << msg;
}

TEST(HostileTokenizer, DeepNestingIsRefused) {
  // 100k levels: the parser refuses it before any recursive walk.
  std::string text = base().dump();
  const size_t at = text.find("\"normalizer\":null");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 17, "\"normalizer\":" + std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_HAS(error_of([&] { Tokenizer::from_json_string(text, "t.json"); }),
             "[tokenizer] t.json is nested more than 512 levels deep");
  // Within the parser's limit, Sequences nest at most 16 deep.
  json normalizer = {{"type", "NFC"}}, pre = json::parse(testing::kGpt2PreTokenizer);
  for (int i = 0; i < 20; ++i) {
    normalizer = {{"type", "Sequence"}, {"normalizers", {normalizer}}};
    pre = {{"type", "Sequence"}, {"pretokenizers", {pre}}};
  }
  json j = base();
  j["normalizer"] = normalizer;
  EXPECT_HAS(load_error(j), "nests Sequences more than 16 deep");
  j = base();
  j["pre_tokenizer"] = pre;
  EXPECT_HAS(load_error(j), "nests Sequences more than 16 deep");
  // And a Sequence of many steps stops at 64, before compiling them all.
  j = base();
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array()}};
  for (int i = 0; i < 1000; ++i) j["pre_tokenizer"]["pretokenizers"].push_back(json::parse(testing::kGpt2PreTokenizer));
  EXPECT_HAS(load_error(j), "field 'pre_tokenizer.pretokenizers[64]': more than 64 pre-tokenizer steps");
}

// Every field of a valid file replaced by a value of each other kind: always a tidal::Error naming the
// file, never a JSON library exception or a crash.
TEST(HostileTokenizer, EveryFieldOfEveryKindIsAClearError) {
  const std::vector<json> kinds = {nullptr, true, -1, 1.5, "x", json::array(), json::object(), json::array({1})};
  const json original = base();
  int tried = 0;
  std::function<void(const json::json_pointer&, const json&)> walk = [&](const json::json_pointer& ptr, const json& v) {
    for (const json& k : kinds) {
      json j = original;
      j[ptr] = k;
      ++tried;
      std::string msg;
      try {
        Tokenizer::from_json_string(j.dump(), "t.json");
        continue;  // some replacements are valid (a null normalizer, a false flag)
      } catch (const Error& e) {
        msg = e.what();
      } catch (const std::exception& e) {
        ADD_FAILURE() << ptr.to_string() << " = " << k.dump() << ": " << e.what();
        continue;
      }
      EXPECT_HAS(msg, "[tokenizer] t.json");
      EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
    }
    if (v.is_structured() && ptr.to_string().find("/model/vocab/") == std::string::npos) {
      size_t i = 0;
      for (auto it = v.begin(); it != v.end(); ++it, ++i) {
        if (i >= 3 && ptr.to_string() == "/model/vocab") break;  // three tokens stand for all
        walk(v.is_array() ? ptr / i : ptr / it.key(), *it);
      }
    }
  };
  for (auto it = original.begin(); it != original.end(); ++it) walk(json::json_pointer("/" + it.key()), *it);
  EXPECT_GT(tried, 100);
}

}  // namespace
}  // namespace tidal::data
