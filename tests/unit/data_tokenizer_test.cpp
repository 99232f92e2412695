// The byte-level BPE tokenizer: hand-built GPT-2 and Qwen tokenizer.json files with encodings worked
// out by hand from the merge rules, exact round trips on any bytes, special tokens, load/save, errors.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include <random>

#include "tests/unit/data_test_util.h"
#include "tidal/base/error.h"
#include "tidal/data/tokenizer.h"

namespace tidal::data {
namespace {

using Ids = std::vector<int64_t>;
using testing::make_tokenizer_json;

// Byte token ids in GPT-2's order: printable ASCII b is b - 33; space (Ġ) is 220.
int64_t b(char c) { return c == ' ' ? 220 : int64_t(c) - 33; }

// Merges, in rank order (ids from 256):
//   256 "he" = h e      257 "ll" = l l      258 "Ġt" = Ġ t     259 "Ġthe" = Ġt he
//   260 "hell" = he ll  261 "hello" = hell o   262 "el" = e l  263 "12" = 1 2
// and the added token 264 <|endoftext|>.
const std::vector<std::pair<std::string, std::string>> kMerges = {{"h", "e"},          {"l", "l"},   {"\xC4\xA0", "t"},
                                                                  {"\xC4\xA0t", "he"}, {"he", "ll"}, {"hell", "o"},
                                                                  {"e", "l"},          {"1", "2"}};

Tokenizer gpt2_like() {
  return Tokenizer::from_json_string(make_tokenizer_json(kMerges, {"<|endoftext|>"}, testing::kGpt2PreTokenizer));
}
Tokenizer qwen_like() {
  return Tokenizer::from_json_string(make_tokenizer_json(kMerges, {"<|endoftext|>", "<|im_start|>"},
                                                         testing::kQwenPreTokenizer, R"({"type": "NFC"})",
                                                         /*pair_merges=*/true));
}

TEST(DataTokenizer, Gpt2FormatKnownEncodings) {
  const Tokenizer t = gpt2_like();
  EXPECT_EQ(t.vocab_size(), 265);
  EXPECT_EQ(t.num_merges(), 8);
  EXPECT_EQ(t.eod_id(), 264);
  // "hello": h e l l o -> (h,e) rank 0 -> he l l o -> (l,l) rank 1 -> he ll o -> (he,ll) -> hell o -> hello.
  EXPECT_EQ(t.encode("hello"), (Ids{261}));
  // " the": Ġ t h e -> (h,e) first (rank 0 beats (Ġ,t) rank 2) -> Ġ t he -> Ġt he -> Ġthe.
  EXPECT_EQ(t.encode(" the"), (Ids{259}));
  // " yellow": (l,l) rank 1 beats (e,l) rank 6, and then "e ll" has no merge: Ġ y e ll o w.
  EXPECT_EQ(t.encode(" yellow"), (Ids{220, b('y'), b('e'), 257, b('o'), b('w')}));
  // "123": GPT-2 keeps digit runs together, so (1,2) merges.
  EXPECT_EQ(t.encode("123"), (Ids{263, b('3')}));
  EXPECT_EQ(t.encode("hello<|endoftext|> the"), (Ids{261, 264, 259}));
  EXPECT_EQ(t.encode_ordinary("<|endoftext|>").size(), 13u);  // as plain text: < | endoftext | > pieces
  EXPECT_EQ(t.decode({261, 264, 259}), "hello<|endoftext|> the");
  EXPECT_EQ(t.decode({261, 264, 259}, /*skip_special=*/true), "hello the");
  // No normalizer: a decomposed é stays e + U+0301 (bytes CC 81, spelled Ì and ģ).
  EXPECT_EQ(byte_to_symbol(0x81), "\xC4\xA3");
  EXPECT_EQ(t.encode("e\xCC\x81"), (Ids{b('e'), *t.token_to_id(byte_to_symbol(0xCC)), *t.token_to_id("\xC4\xA3")}));
  EXPECT_EQ(t.id_to_token(259), "\xC4\xA0the");
}

TEST(DataTokenizer, QwenFormatKnownEncodings) {
  const Tokenizer t = qwen_like();
  EXPECT_EQ(t.vocab_size(), 266);
  // Digits are split one by one, so (1,2) never applies; the space before them is a piece of its own.
  EXPECT_EQ(t.encode("123"), (Ids{b('1'), b('2'), b('3')}));
  EXPECT_EQ(t.encode("a 12"), (Ids{b('a'), 220, b('1'), b('2')}));
  EXPECT_EQ(t.encode("hello the"), (Ids{261, 259}));
  EXPECT_EQ(t.encode("<|im_start|>hello<|endoftext|>"), (Ids{265, 261, 264}));
  // NFC: e + U+0301 becomes é (C3 A9), two byte tokens.
  EXPECT_EQ(t.encode("e\xCC\x81"), (Ids{*t.token_to_id(byte_to_symbol(0xC3)), *t.token_to_id(byte_to_symbol(0xA9))}));
  EXPECT_EQ(t.decode(t.encode("e\xCC\x81")), "\xC3\xA9");
}

// Random strings drawn from pieces that stress every path: scripts, emoji, whitespace runs,
// contractions, digits, invalid bytes, special tokens.
std::string random_text(std::mt19937_64& rng, int parts) {
  static const std::vector<std::string> atoms = {"hello",
                                                 " the",
                                                 " yellow",
                                                 "'s",
                                                 "'LL",
                                                 " 123",
                                                 "4567",
                                                 "  ",
                                                 "   \n",
                                                 "\n\n",
                                                 "\t",
                                                 "\r\n",
                                                 " ",
                                                 "\xE4\xBD\xA0\xE5\xA5\xBD",                  // Chinese
                                                 "\xD0\x9F\xD1\x80\xD0\xB8",                  // Russian
                                                 "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7",  // Arabic
                                                 "\xF0\x9F\x98\x80",
                                                 "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",  // emoji, ZWJ sequence
                                                 "e\xCC\x81",
                                                 "\xE0\xA4\xB9\xE0\xA4\xBF",  // combining mark, Devanagari
                                                 "\xFF",
                                                 "\xC0\xAF",
                                                 "\xE2\x82",
                                                 "\x80\x80",
                                                 "\xED\xA0\x80",
                                                 "\x00",  // invalid UTF-8, NUL
                                                 "<|endoftext|>",
                                                 "<|endoftext",
                                                 "$$",
                                                 "...",
                                                 "a.b",
                                                 "x"};
  std::string s;
  for (int i = 0; i < parts; ++i) s += atoms[rng() % atoms.size()];
  return s;
}

TEST(DataTokenizer, RoundTripsAnyBytes) {
  const Tokenizer t = gpt2_like();
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const std::string s = random_text(rng, 1 + int(rng() % 40));
    EXPECT_EQ(t.decode(t.encode(s)), s) << "trial " << trial;
    EXPECT_EQ(t.decode(t.encode_ordinary(s)), s) << "trial " << trial;
  }
  for (int trial = 0; trial < 100; ++trial) {  // uniformly random bytes
    std::string s(rng() % 200, '\0');
    for (char& c : s) c = char(rng());
    EXPECT_EQ(t.decode(t.encode(s)), s) << "trial " << trial;
  }
  std::string all;
  for (int c = 0; c < 256; ++c) all += char(c);
  EXPECT_EQ(t.decode(t.encode(all)), all);
  EXPECT_EQ(t.encode(""), Ids{});
  EXPECT_EQ(t.decode({}), "");
}

TEST(DataTokenizer, CacheGivesTheSameIdsAsTheMergeLoop) {
  const Tokenizer t = gpt2_like();
  const std::string s = "hello the yellow hello the yellow 123 hello";
  const Ids first = t.encode(s), second = t.encode(s);  // the second call reads the cache
  EXPECT_EQ(first, second);
  const Tokenizer copy = t;  // copies share the model and the cache
  EXPECT_EQ(copy.encode(s), first);
}

TEST(DataTokenizer, EncodeBatchEqualsEncode) {
  const Tokenizer t = qwen_like();
  std::mt19937_64 rng(5);
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back(random_text(rng, 1 + int(rng() % 30)));
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  const std::vector<Ids> batch = t.encode_batch(views);
  ASSERT_EQ(batch.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i], t.encode(texts[i])) << i;
  EXPECT_TRUE(t.encode_batch({}).empty());
}

TEST(DataTokenizer, SaveLoadRoundTrip) {
  const std::string dir = testing::scratch_dir("tokenizer_save");
  const Tokenizer t = qwen_like();
  t.save(dir + "/tokenizer.json");
  const Tokenizer u = Tokenizer::load(dir + "/tokenizer.json");
  std::mt19937_64 rng(3);
  for (int i = 0; i < 50; ++i) {
    const std::string s = random_text(rng, 20);
    EXPECT_EQ(u.encode(s), t.encode(s));
  }
  EXPECT_EQ(u.vocab_size(), t.vocab_size());
  // A model directory stands for its tokenizer.json; a directory without one is named, not "not valid JSON".
  EXPECT_EQ(Tokenizer::load(dir).encode("hello world"), t.encode("hello world"));
  const std::string empty = testing::scratch_dir("tokenizer_empty_dir");
  try {
    Tokenizer::load(empty);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory without a tokenizer.json"), std::string::npos) << e.what();
  }
}

TEST(DataTokenizer, AddedTokenOptions) {
  std::string j = make_tokenizer_json(kMerges, {"<mask>"}, testing::kGpt2PreTokenizer);
  const std::string plain = "\"content\": \"<mask>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false";
  const size_t at = j.find(plain);
  ASSERT_NE(at, std::string::npos);
  j.replace(at, plain.size(), "\"content\": \"<mask>\", \"single_word\": false, \"lstrip\": true, \"rstrip\": true");
  const Tokenizer t = Tokenizer::from_json_string(j);
  // lstrip/rstrip: the spaces around <mask> belong to it.
  EXPECT_EQ(t.encode("hello  <mask>  hello"), (Ids{261, 264, 261}));
  EXPECT_THROW(t.eod_id(), Error);  // no <|endoftext|> here
}

// Hugging Face's AddedVocabulary: a "normalized": true added token is matched in the normalized text (by its
// normalized content), the others in the raw text first; with an NFC normalizer "cafe\u0301" (written NFD)
// matches both spellings of café, while the non-normalized NFD "nai\u0308ve" matches only itself. The ids
// are Hugging Face tokenizers' own (tests/fixtures/hf/normalized_added_tokens.json, hf_fixtures.py tokenizer).
TEST(DataTokenizer, NormalizedAddedTokensMatchAsHuggingFaces) {
  const std::string path = std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/hf/normalized_added_tokens.json";
  const nlohmann::json f = nlohmann::json::parse(std::ifstream(path));
  const Tokenizer t = Tokenizer::from_json_string(f["tokenizer"].dump(), path);
  ASSERT_EQ(f["cases"].size(), 5u);
  for (const nlohmann::json& c : f["cases"])
    EXPECT_EQ(t.encode(c["text"].get<std::string>()), c["ids"].get<Ids>()) << c["text"];
  EXPECT_EQ(t.encode_ordinary("<x>").size(), 3u);  // no added token without allow_added
}

TEST(DataTokenizer, MalformedFilesAreErrors) {
  EXPECT_THROW(Tokenizer::from_json_string("{not json"), Error);
  EXPECT_THROW(Tokenizer::from_json_string(R"({"model": {"type": "WordPiece", "vocab": {}}})"), Error);
  EXPECT_THROW(Tokenizer::load("/nonexistent/tokenizer.json"), Error);
  // A merge whose result is not in the vocabulary.
  std::string j = make_tokenizer_json({{"a", "b"}}, {}, testing::kGpt2PreTokenizer);
  const size_t at = j.find("\"ab\": 256");
  ASSERT_NE(at, std::string::npos);
  j.replace(at, 9, "\"zz\": 256");
  try {
    Tokenizer::from_json_string(j, "bad.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("field 'model.merges[0]': the two parts joined is not in the vocabulary"),
              std::string::npos)
        << e.what();
  }
  // Not byte-level (no ByteLevel pre-tokenizer step).
  EXPECT_THROW(Tokenizer::from_json_string(make_tokenizer_json({}, {}, "null")), Error);
  const Tokenizer t = gpt2_like();
  EXPECT_THROW(t.decode({265}), Error);
  EXPECT_THROW(t.decode({-1}), Error);
  EXPECT_THROW(Tokenizer().encode("x"), Error);
}

}  // namespace
}  // namespace tidal::data
