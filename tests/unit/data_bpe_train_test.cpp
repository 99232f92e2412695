// BPE training: merges worked out by hand on toy corpora, determinism, and a real corpus.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <random>

#include "tests/unit/data_test_util.h"
#include "tidal/base/error.h"
#include "tidal/data/byte_level.h"
#include "tidal/data/pretokenizer.h"
#include "tidal/data/tokenizer.h"

namespace tidal::data {
namespace {

TrainOptions options(int64_t vocab_size, int64_t min_frequency = 1) {
  TrainOptions o;
  o.vocab_size = vocab_size;
  o.min_frequency = min_frequency;
  return o;
}

TEST(DataBpeTrain, ToyCorpusMergesByHand) {
  // Words: "ab" x1, " ab" x2, " abc" x1 (Ġ is the space). Pair counts: (a,b) 4, (Ġ,a) 3, (b,c) 1.
  // 1st merge a b -> ab; then (Ġ,ab) 3, (ab,c) 1: 2nd Ġ ab -> Ġab; 3rd Ġab c -> Ġabc (count 1).
  TrainStats stats;
  const Tokenizer t = Tokenizer::train({"ab ab ab abc"}, options(256 + 3 + 1), &stats);
  EXPECT_EQ(stats.merges, 3);
  EXPECT_EQ(stats.unique_words, 3);
  EXPECT_EQ(t.id_to_token(256), "ab");
  EXPECT_EQ(t.id_to_token(257),
            "\xC4\xA0"
            "ab");
  EXPECT_EQ(t.id_to_token(258),
            "\xC4\xA0"
            "abc");
  EXPECT_EQ(t.eod_id(), 259);
  EXPECT_EQ(t.vocab_size(), 260);
  EXPECT_EQ(t.encode(" abc ab<|endoftext|>"), (std::vector<int64_t>{258, 257, 259}));
  // min_frequency 2 stops before the pair seen once.
  EXPECT_EQ(Tokenizer::train({"ab ab ab abc"}, options(260, 2)).num_merges(), 2);
}

TEST(DataBpeTrain, TiesGoToTheSmallerPairOfIds) {
  // "xy" and " yx": (x,y), (Ġ,y), (y,x) all seen once. Ids: x 87, y 88, Ġ 220, so (x,y) < (y,x) < (Ġ,y).
  const Tokenizer t = Tokenizer::train({"xy yx"}, options(259, 1));
  EXPECT_EQ(t.id_to_token(256), "xy");
  EXPECT_EQ(t.id_to_token(257), "yx");
}

TEST(DataBpeTrain, SpecialTokensAreNotLearnedFrom) {
  const Tokenizer t = Tokenizer::train({"aaaa<|endoftext|>aaaa<|endoftext|>"}, options(300, 1));
  for (int64_t id = 256; id < t.vocab_size() - 1; ++id)
    EXPECT_EQ(t.id_to_token(id).find('|'), std::string::npos) << t.id_to_token(id);
  EXPECT_EQ(t.encode("<|endoftext|>"), (std::vector<int64_t>{t.eod_id()}));
}

TEST(DataBpeTrain, Deterministic) {
  const std::vector<std::string> texts = {"the quick brown fox jumps over the lazy dog. " + std::string(50, 'z'),
                                          "The dog sleeps; the fox runs.\n\nThe end, the end, the end."};
  const Tokenizer a = Tokenizer::train(texts, options(320));
  const Tokenizer b = Tokenizer::train(texts, options(320));
  EXPECT_EQ(a.to_json_string(), b.to_json_string());
  EXPECT_EQ(a.decode(a.encode(texts[1])), texts[1]);
  TrainOptions defaults;
  defaults.vocab_size = 320;
  EXPECT_EQ(Tokenizer::train(texts, 320).to_json_string(), Tokenizer::train(texts, defaults).to_json_string());
}

// The textbook algorithm: recount every pair of every word before each merge. The incremental
// trainer must pick the same merges in the same order.
std::vector<std::string> naive_merges(const std::vector<std::string>& texts, int merges) {
  std::map<std::string, int64_t> counts;
  for (const std::string& t : texts)
    PreTokenizer::gpt2().split(t, [&](std::string_view piece) { ++counts[std::string(piece)]; });
  std::array<int32_t, 256> symbol;
  for (int i = 0; i < 256; ++i) symbol[byte_rank_order()[i]] = i;
  std::vector<std::string> spelling;
  for (int i = 0; i < 256; ++i) spelling.push_back(byte_to_symbol(byte_rank_order()[i]));
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  for (const auto& [w, c] : counts) {
    std::vector<int32_t> s;
    for (unsigned char ch : w) s.push_back(symbol[ch]);
    words.push_back({s, c});
  }
  std::vector<std::string> out;
  for (int m = 0; m < merges; ++m) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pairs;
    for (const auto& [s, c] : words)
      for (size_t i = 0; i + 1 < s.size(); ++i) pairs[{s[i], s[i + 1]}] += c;
    std::pair<int32_t, int32_t> best{-1, -1};
    int64_t best_count = 0;
    for (const auto& [p, c] : pairs)  // map order: the first of equal counts is the smaller pair
      if (c > best_count) {
        best = p;
        best_count = c;
      }
    if (best_count < 1) break;
    const int32_t id = int32_t(spelling.size());
    spelling.push_back(spelling[size_t(best.first)] + spelling[size_t(best.second)]);
    out.push_back(spelling.back());
    for (auto& [s, c] : words) {
      std::vector<int32_t> merged;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == best.first && s[i + 1] == best.second) {
          merged.push_back(id);
          ++i;
        } else {
          merged.push_back(s[i]);
        }
      }
      s = merged;
    }
  }
  return out;
}

TEST(DataBpeTrain, SameMergesAsTheNaiveAlgorithm) {
  // Pseudo-English with repeated letters (aaaa runs exercise overlapping merges) and some UTF-8.
  const std::vector<std::string> vocab = {
      "the", "then", "there",       "aaaa", "aaa", "banana", "bandana", "\xC3\xA9t\xC3\xA9", "\xE4\xBD\xA0\xE5\xA5\xBD",
      "123", "1234", "mississippi", "!!",   "  "};
  std::mt19937_64 rng(11);
  std::string text;
  for (int i = 0; i < 4000; ++i) {
    std::string word = vocab[rng() % vocab.size()];
    if (rng() % 2 == 0) {  // a random word over a small alphabet: many distinct, overlapping words
      word.clear();
      for (uint64_t n = 1 + rng() % 8; n > 0; --n) word += "aabnst"[rng() % 6];
    }
    text += word + (rng() % 7 == 0 ? "\n" : " ");
  }
  const int merges = 150;
  const Tokenizer t = Tokenizer::train({text}, options(256 + merges + 1));
  const std::vector<std::string> expected = naive_merges({text}, merges);
  ASSERT_EQ(t.num_merges(), int64_t(expected.size()));
  for (size_t k = 0; k < expected.size(); ++k) EXPECT_EQ(t.id_to_token(256 + int64_t(k)), expected[k]) << "merge " << k;
}

// Very long words (Note [BPE training]: the merges are linked-list rewrites at the pair's occurrences, so a
// word's length costs linearly): a 20,000-letter DNA-like word, a run of one letter (overlapping merges all
// the way), and short words beside them give the textbook algorithm's merges.
TEST(DataBpeTrain, LongWordsGiveTheNaiveMerges) {
  std::mt19937_64 rng(5);
  std::string dna;
  for (int i = 0; i < 20000; ++i) dna += "ACGT"[rng() % 4];
  const std::string text = dna + " " + std::string(5000, 'a') + " banana bandana " + dna.substr(0, 3000);
  const int merges = 60;
  const Tokenizer t = Tokenizer::train({text}, options(256 + merges + 1));
  const std::vector<std::string> expected = naive_merges({text}, merges);
  ASSERT_EQ(t.num_merges(), int64_t(expected.size()));
  for (size_t k = 0; k < expected.size(); ++k) EXPECT_EQ(t.id_to_token(256 + int64_t(k)), expected[k]) << "merge " << k;
}

TEST(DataBpeTrain, BadOptionsAreErrors) {
  EXPECT_THROW(Tokenizer::train({"x"}, options(200)), Error);  // below 256 + specials
  TrainOptions o = options(300);
  o.special_tokens = {"\xFF"};
  EXPECT_THROW(Tokenizer::train({"x"}, o), Error);
  EXPECT_THROW(Tokenizer::train_files({"/nonexistent/corpus.txt"}, options(300)), Error);
}

// A 1024-token vocabulary on tinyshakespeare (1.1 MB): exact round trip of the whole text, and the
// compression measured when this test was written (docs/data.md): 2.425 bytes per token.
TEST(DataBpeTrain, TinyShakespeare1024) {
  const std::string path = testing::tinyshakespeare_path();
  if (path.empty()) GTEST_SKIP() << "tinyshakespeare.txt not found (set TIDAL_DATA_DIR)";
  TrainStats stats;
  const Tokenizer t = Tokenizer::train_files({path}, options(1024, 2), &stats);
  EXPECT_EQ(t.vocab_size(), 1024);
  EXPECT_EQ(stats.merges, 1024 - 256 - 1);
  EXPECT_LT(stats.seconds, 10.0);
  const std::string text = testing::read_file(path);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int64_t> ids = t.encode(text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(t.decode(ids), text);
  const double bytes_per_token = double(text.size()) / double(ids.size());
  std::printf("tinyshakespeare: %zu bytes -> %zu tokens (%.3f bytes/token), trained in %.2f s, encoded at %.1f MB/s\n",
              text.size(), ids.size(), bytes_per_token, stats.seconds, double(text.size()) / seconds / 1e6);
  EXPECT_NEAR(bytes_per_token, 2.425, 0.001);
}

}  // namespace
}  // namespace tidal::data
