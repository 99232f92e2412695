// Tokenizer throughput on tinyshakespeare (MB/s of text): encode with a warm piece cache, the
// pre-tokenization regex alone, decode, and BPE training. Skips when the corpus is not found.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "tidal/data/corpus.h"
#include "tidal/data/pretokenizer.h"
#include "tidal/data/tokenizer.h"

namespace {

using tidal::data::Tokenizer;

const std::string& corpus() {
  static const std::string text = [] {
    for (std::string dir : {std::string(std::getenv("TIDAL_DATA_DIR") ? std::getenv("TIDAL_DATA_DIR") : ""),
                            std::string("/work/shared/data")})
      if (!dir.empty() && std::filesystem::exists(dir + "/tinyshakespeare.txt"))
        return tidal::data::read_file(dir + "/tinyshakespeare.txt");
    return std::string();
  }();
  return text;
}

const Tokenizer& tokenizer(int64_t vocab) {
  static std::map<int64_t, Tokenizer> cache;
  auto it = cache.find(vocab);
  if (it == cache.end()) {
    tidal::data::TrainOptions opt;
    opt.vocab_size = vocab;
    it = cache.emplace(vocab, Tokenizer::train({corpus()}, opt)).first;
  }
  return it->second;
}

void set_mbps(benchmark::State& state, double bytes) {
  state.counters["MB/s"] = benchmark::Counter(bytes * double(state.iterations()) / 1e6, benchmark::Counter::kIsRate);
}

void BM_TokenizerEncode(benchmark::State& state) {
  if (corpus().empty()) return state.SkipWithError("tinyshakespeare.txt not found (set TIDAL_DATA_DIR)");
  const Tokenizer& t = tokenizer(state.range(0));
  t.encode(corpus());  // warm the piece cache
  size_t n = 0;
  for (auto _ : state) n = t.encode(corpus()).size();
  set_mbps(state, double(corpus().size()));
  state.counters["bytes/token"] = double(corpus().size()) / double(n);
}
BENCHMARK(BM_TokenizerEncode)->Arg(1024)->Arg(8192)->Unit(benchmark::kMillisecond);

void BM_TokenizerPreTokenize(benchmark::State& state) {
  if (corpus().empty()) return state.SkipWithError("tinyshakespeare.txt not found");
  const tidal::data::PreTokenizer p = tidal::data::PreTokenizer::gpt2();
  for (auto _ : state) {
    size_t pieces = 0;
    p.split(corpus(), [&](std::string_view) { ++pieces; });
    benchmark::DoNotOptimize(pieces);
  }
  set_mbps(state, double(corpus().size()));
}
BENCHMARK(BM_TokenizerPreTokenize)->Unit(benchmark::kMillisecond);

void BM_TokenizerDecode(benchmark::State& state) {
  if (corpus().empty()) return state.SkipWithError("tinyshakespeare.txt not found");
  const Tokenizer& t = tokenizer(8192);
  const std::vector<int64_t> ids = t.encode(corpus());
  for (auto _ : state) benchmark::DoNotOptimize(t.decode(ids));
  set_mbps(state, double(corpus().size()));
}
BENCHMARK(BM_TokenizerDecode)->Unit(benchmark::kMillisecond);

void BM_TokenizerTrain(benchmark::State& state) {
  if (corpus().empty()) return state.SkipWithError("tinyshakespeare.txt not found");
  tidal::data::TrainOptions opt;
  opt.vocab_size = state.range(0);
  for (auto _ : state) benchmark::DoNotOptimize(Tokenizer::train({corpus()}, opt).vocab_size());
  set_mbps(state, double(corpus().size()));
}
BENCHMARK(BM_TokenizerTrain)->Arg(8192)->Unit(benchmark::kMillisecond);

}  // namespace
