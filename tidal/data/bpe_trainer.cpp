// Byte-level BPE training (Tokenizer::train), GPT-2 style, with the incremental algorithm of Hugging
// Face's BpeTrainer.
//
// Note [BPE training]: pre-tokenize the corpus with GPT-2's pattern and count distinct pieces ("words").
// Count every adjacent symbol pair over words (weighted by word count) and index which words hold each
// pair. Repeatedly take the most frequent pair (ties: the smaller pair of ids, so the result never
// depends on hash order), give it the next id, and rewrite only where it occurs: the words' symbols are
// linked lists, each pair keeps the positions it starts at, and a rewrite changes the counts of the
// neighbouring pairs; pairs that gained count are pushed on a max-heap. Stale heap entries (a count that
// has since fallen) are re-pushed with the true count when popped. Cost per merge is proportional to the
// pair's occurrences, not to the corpus or to the length of the words holding it (a 1 MB "word" of DNA
// letters trains in linear time).
#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "tidal/base/error.h"
#include "tidal/data/bpe.h"
#include "tidal/data/byte_level.h"
#include "tidal/data/pretokenizer.h"
#include "tidal/data/tokenizer.h"

namespace tidal::data {
namespace {

using ordered_json = nlohmann::ordered_json;

inline uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
inline int32_t pair_left(uint64_t p) { return int32_t(p >> 32); }
inline int32_t pair_right(uint64_t p) { return int32_t(p & 0xFFFFFFFFu); }

// Counts the pre-tokenized pieces of a corpus, with special tokens cut out of the text first.
class WordCounter {
 public:
  explicit WordCounter(const std::vector<std::string>& specials) : specials_(specials) {}

  void add(std::string_view text) {
    bytes_ += int64_t(text.size());
    size_t begin = 0;
    while (begin < text.size()) {
      size_t next = std::string_view::npos, len = 0;
      for (const std::string& s : specials_) {
        const size_t at = text.find(s, begin);
        if (at < next || (at == next && s.size() > len)) {
          next = at;
          len = s.size();
        }
      }
      const size_t end = next == std::string_view::npos ? text.size() : next;
      pretokenizer_.split(text.substr(begin, end - begin), [&](std::string_view piece) {
        ++words_;
        auto it = counts_.find(piece);
        if (it == counts_.end())
          counts_.emplace(std::string(piece), 1);
        else
          ++it->second;
      });
      begin = end == text.size() ? end : end + len;
    }
  }
  const StringMap<int64_t>& counts() const { return counts_; }
  int64_t bytes() const { return bytes_; }
  int64_t words() const { return words_; }

 private:
  std::vector<std::string> specials_;
  PreTokenizer pretokenizer_ = PreTokenizer::gpt2();
  StringMap<int64_t> counts_;
  int64_t bytes_ = 0, words_ = 0;
};

struct HeapEntry {
  int64_t count;
  uint64_t pair;
  // Max-heap on count; among equal counts the smaller pair comes first.
  bool operator<(const HeapEntry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

Tokenizer train_from_counts(const WordCounter& counter, const TrainOptions& opt, TrainStats* stats,
                            std::chrono::steady_clock::time_point start) {
  const int64_t n_special = int64_t(opt.special_tokens.size());
  TIDAL_CHECK(opt.vocab_size >= 256 + n_special, "[tokenizer train] vocab_size ", opt.vocab_size,
              " is too small: it must hold the 256 byte tokens and ", n_special, " special tokens");
  TIDAL_CHECK(opt.vocab_size < (int64_t(1) << 31), "[tokenizer train] vocab_size ", opt.vocab_size, " is too large");
  for (const std::string& s : opt.special_tokens) {
    TIDAL_CHECK(!s.empty(), "[tokenizer train] a special token is empty");
    for (size_t i = 0; i < s.size();) {
      const int len = utf8_char_length(s, i);
      TIDAL_CHECK(len > 0, "[tokenizer train] special token '", s, "' is not valid UTF-8");
      i += size_t(len);
    }
  }
  const int64_t target_merges = opt.vocab_size - 256 - n_special;

  // Symbols 0..255 are the bytes in GPT-2's order; merge k makes symbol 256 + k.
  const uint8_t* order = byte_rank_order();
  std::array<int32_t, 256> byte_symbol;
  for (int i = 0; i < 256; ++i) byte_symbol[order[i]] = i;

  // Words in a fixed order (sorted) so the where-index lists, and with them the run time, are stable.
  std::vector<std::pair<std::string_view, int64_t>> sorted;
  sorted.reserve(counter.counts().size());
  for (const auto& [w, c] : counter.counts()) sorted.push_back({w, c});
  std::sort(sorted.begin(), sorted.end());
  // Every word's symbols in one array, linked (prev / next within the word, -1 at its ends), so a merge
  // rewrites a position in O(1); occurrences[p] lists the positions where pair p may start (stale ones are
  // skipped when read). Work per merge is proportional to the pair's occurrences: linear in the corpus's
  // symbols overall, however long one word is (Note [BPE training]).
  std::vector<int32_t> sym;
  std::vector<int64_t> prev, next, weight;  // weight: the count of the word a position is in
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int64_t>> occurrences;
  for (const auto& [w, count] : sorted) {
    const int64_t first = int64_t(sym.size());
    for (size_t i = 0; i < w.size(); ++i) {
      const int64_t at = int64_t(sym.size());
      sym.push_back(byte_symbol[static_cast<unsigned char>(w[i])]);
      prev.push_back(i == 0 ? -1 : at - 1);
      next.push_back(i + 1 == w.size() ? -1 : at + 1);
      weight.push_back(count);
      if (at > first) {
        const uint64_t p = pair_key(sym[size_t(at - 1)], sym[size_t(at)]);
        pair_count[p] += count;
        occurrences[p].push_back(at - 1);
      }
    }
  }
  std::vector<HeapEntry> heap;
  heap.reserve(pair_count.size());
  for (const auto& [p, c] : pair_count) heap.push_back({c, p});
  std::make_heap(heap.begin(), heap.end());

  std::vector<std::pair<int32_t, int32_t>> merges;
  std::unordered_set<uint64_t> grown;
  const auto change = [&](uint64_t p, int64_t delta, int64_t at) {
    pair_count[p] += delta;
    if (delta > 0) {
      occurrences[p].push_back(at);
      grown.insert(p);
    }
  };
  while (int64_t(merges.size()) < target_merges && !heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const HeapEntry top = heap.back();
    heap.pop_back();
    auto pc = pair_count.find(top.pair);
    const int64_t actual = pc == pair_count.end() ? 0 : pc->second;
    if (actual != top.count) {  // stale: counts only fall for existing pairs
      if (actual > 0) {
        heap.push_back({actual, top.pair});
        std::push_heap(heap.begin(), heap.end());
      }
      continue;
    }
    if (actual < std::max<int64_t>(opt.min_frequency, 1)) break;
    const int32_t a = pair_left(top.pair), b = pair_right(top.pair);
    const int32_t replacement = int32_t(256 + merges.size());
    merges.push_back({a, b});

    // Left to right within each word (positions ascend through a word), as Hugging Face's Word::merge:
    // in "a a a" the pair (a, a) merges at the first two, and the third's occurrence is then stale.
    std::vector<int64_t> at = std::move(occurrences[top.pair]);
    occurrences.erase(top.pair);
    std::sort(at.begin(), at.end());
    at.erase(std::unique(at.begin(), at.end()), at.end());
    grown.clear();
    for (const int64_t i : at) {
      const int64_t j = next[size_t(i)];
      if (sym[size_t(i)] != a || j < 0 || sym[size_t(j)] != b) continue;  // stale (or merged already)
      const int64_t w = weight[size_t(i)], left = prev[size_t(i)], right = next[size_t(j)];
      if (left >= 0) {
        change(pair_key(sym[size_t(left)], a), -w, left);
        change(pair_key(sym[size_t(left)], replacement), w, left);
      }
      if (right >= 0) {
        change(pair_key(b, sym[size_t(right)]), -w, i);
        change(pair_key(replacement, sym[size_t(right)]), w, i);
      }
      sym[size_t(i)] = replacement;
      next[size_t(i)] = right;
      if (right >= 0) prev[size_t(right)] = i;
      sym[size_t(j)] = -1;  // gone
    }
    pair_count.erase(top.pair);
    grown.erase(top.pair);
    for (uint64_t p : grown) {
      heap.push_back({pair_count[p], p});
      std::push_heap(heap.begin(), heap.end());
    }
  }

  // The tokenizer.json of the result (GPT-2's layout: bytes, merges, then the special tokens).
  std::vector<std::string> spelling;
  spelling.reserve(256 + merges.size());
  for (int i = 0; i < 256; ++i) spelling.push_back(byte_to_symbol(order[i]));
  for (const auto& [l, r] : merges) spelling.push_back(spelling[size_t(l)] + spelling[size_t(r)]);
  ordered_json vocab = ordered_json::object();
  for (size_t id = 0; id < spelling.size(); ++id) vocab[spelling[id]] = id;
  ordered_json added = ordered_json::array();
  int64_t next_id = int64_t(spelling.size());
  for (const std::string& s : opt.special_tokens) {
    if (!vocab.contains(s)) vocab[s] = next_id++;  // a special token spelled like a merge keeps its id
    added.push_back({{"id", vocab[s]},
                     {"content", s},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  ordered_json merges_json = ordered_json::array();
  for (const auto& [l, r] : merges) merges_json.push_back(spelling[size_t(l)] + " " + spelling[size_t(r)]);
  ordered_json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  ordered_json doc;
  doc["version"] = "1.0";
  doc["truncation"] = nullptr;
  doc["padding"] = nullptr;
  doc["added_tokens"] = added;
  doc["normalizer"] = nullptr;
  doc["pre_tokenizer"] = byte_level;
  doc["post_processor"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
  doc["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  doc["model"] = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", nullptr},
                  {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr},
                  {"fuse_unk", false},
                  {"byte_fallback", false},
                  {"ignore_merges", false},
                  {"vocab", vocab},
                  {"merges", merges_json}};
  Tokenizer tok = Tokenizer::from_json_string(doc.dump(2), "trained tokenizer");
  if (stats != nullptr) {
    stats->bytes = counter.bytes();
    stats->words = counter.words();
    stats->unique_words = int64_t(counter.counts().size());
    stats->merges = int64_t(merges.size());
    stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return tok;
}

}  // namespace

Tokenizer Tokenizer::train(const std::vector<std::string>& texts, const TrainOptions& options, TrainStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  WordCounter counter(options.special_tokens);
  for (const std::string& t : texts) counter.add(t);
  return train_from_counts(counter, options, stats, start);
}

Tokenizer Tokenizer::train(const std::vector<std::string>& texts, int64_t vocab_size,
                           const std::vector<std::string>& special_tokens) {
  TrainOptions opt;
  opt.vocab_size = vocab_size;
  opt.special_tokens = special_tokens;
  return train(texts, opt);
}

Tokenizer Tokenizer::train_files(const std::vector<std::string>& paths, const TrainOptions& options,
                                 TrainStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  WordCounter counter(options.special_tokens);
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    TIDAL_CHECK(in.good(), "[tokenizer train] cannot open '", path, "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    counter.add(ss.str());
  }
  return train_from_counts(counter, options, stats, start);
}

}  // namespace tidal::data
