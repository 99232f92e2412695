// Index family: embedding lookup and its dense backward, router topk, and the MoE gather/scatter
// ops (docs/performance.md). Memory-bound: GB/s counts the bytes each kernel must read and write.
#include <benchmark/benchmark.h>

#include "bench/bench_util.h"

#include "tidal/ops/embedding.h"
#include "tidal/ops/index.h"
#include "tidal/ops/random.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

constexpr int64_t kIds = 4096;

// (V, C) table, 4096 ids -> (4096, C): reads and writes 4096 rows.
void BM_EmbeddingForward(benchmark::State& state) {
  const int64_t vocab = state.range(0), c = state.range(1);
  Tensor w = randn({vocab, c}), ids = randint(0, vocab, {kIds});
  for (auto _ : state) benchmark::DoNotOptimize(embedding(w, ids));
  bench::set_gbps(state, 2.0 * double(kIds * c) * 4);
}

// The dense (V, C) gradient from (4096, C): writes the whole table once, reads 4096 rows. The
// output buffer is reused (steady state: no first-touch page faults).
void BM_EmbeddingBackward(benchmark::State& state) {
  const int64_t vocab = state.range(0), c = state.range(1);
  Tensor gw = zeros({vocab, c}), g = randn({kIds, c}), ids = randint(0, vocab, {kIds});
  for (auto _ : state) {
    device_kernels(Device::cpu()).embedding_backward(current_stream(Device::cpu()), gw, g, ids);
    benchmark::DoNotOptimize(gw.data<float>());
  }
  bench::set_gbps(state, double(vocab * c + kIds * c) * 4);
}

// Router top-k: (tokens, experts) probabilities, k = 8.
void BM_TopK(benchmark::State& state) {
  const int64_t rows = state.range(0), experts = state.range(1);
  Tensor x = rand({rows, experts});
  for (auto _ : state) benchmark::DoNotOptimize(topk(x, 8).values);
  bench::set_gbps(state, double(rows * experts) * 4 + double(rows * 8) * 12);
  state.SetItemsProcessed(state.iterations() * rows);  // rows/s
}

// MoE sizes: T = 4096 tokens of C = 1024, k = 8 experts per token -> 32768 routed rows.
constexpr int64_t kTokens = 4096, kTopK = 8;

// Grouping tokens per expert: rows of x (T, C) picked by 32768 slot -> token ids.
void BM_IndexSelectRows(benchmark::State& state) {
  const int64_t c = state.range(0);
  Tensor x = randn({kTokens, c});
  Tensor tokens = randint(0, kTokens, {kTokens * kTopK});
  for (auto _ : state) benchmark::DoNotOptimize(index_select(x, 0, tokens));
  bench::set_gbps(state, 2.0 * double(kTokens * kTopK * c) * 4);
}

// Combining expert outputs: (32768, C) rows added into (T, C) at their tokens.
void BM_IndexAddRows(benchmark::State& state) {
  const int64_t c = state.range(0);
  Tensor out = randn({kTokens, c}), src = randn({kTokens * kTopK, c});
  Tensor tokens = randint(0, kTokens, {kTokens * kTopK});
  for (auto _ : state) benchmark::DoNotOptimize(index_add(out, 0, tokens, src));
  bench::set_gbps(state, double(kTokens * kTopK * c) * 4 * 3 + double(kTokens * c) * 4 * 2);
}

// Routing weights: probabilities (T, E) gathered at the top-k expert ids (T, 8).
void BM_GatherRouter(benchmark::State& state) {
  const int64_t experts = state.range(0);
  Tensor probs = rand({kTokens, experts});
  Tensor ids = topk(probs, kTopK).indices;
  for (auto _ : state) benchmark::DoNotOptimize(gather(probs, 1, ids));
  bench::set_gbps(state, double(kTokens * kTopK) * (8 + 4 + 4));
}

// Gradient of the routed rows back to tokens through gather's backward layout: scatter_add along
// dim 0 of a (32768, C) source into (T, C).
void BM_ScatterAddRows(benchmark::State& state) {
  const int64_t c = state.range(0);
  Tensor out = zeros({kTokens, c}), src = randn({kTokens * kTopK, c});
  Tensor index = randint(0, kTokens, {kTokens * kTopK, 1});
  Tensor full_index = index.expand(Shape{kTokens * kTopK, c}).contiguous();
  for (auto _ : state) benchmark::DoNotOptimize(scatter_add(out, 0, full_index, src));
  bench::set_gbps(state, double(kTokens * kTopK * c) * (4 * 3 + 8) + double(kTokens * c) * 4 * 2);
}

// Sorting the 32768 slot -> expert ids and counting tokens per expert.
void BM_ArgsortExpertIds(benchmark::State& state) {
  Tensor ids = randint(0, state.range(0), {kTokens * kTopK});
  for (auto _ : state) benchmark::DoNotOptimize(argsort(ids));
  bench::set_gbps(state, double(kTokens * kTopK) * 16);
}

void BM_BincountExpertIds(benchmark::State& state) {
  Tensor ids = randint(0, state.range(0), {kTokens * kTopK});
  for (auto _ : state) benchmark::DoNotOptimize(bincount(ids, state.range(0)));
  bench::set_gbps(state, double(kTokens * kTopK) * 8);
}

#define EMBEDDING_SHAPES Args({50304, 768})->Args({50304, 1024})->Args({151936, 768})->Args({151936, 1024})
BENCHMARK(BM_EmbeddingForward)->EMBEDDING_SHAPES->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_EmbeddingBackward)->EMBEDDING_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TopK)->Args({4096, 64})->Args({4096, 128})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_IndexSelectRows)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_IndexAddRows)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ScatterAddRows)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GatherRouter)->Arg(64)->Arg(128)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_ArgsortExpertIds)->Arg(64)->Arg(128)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_BincountExpertIds)->Arg(128)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace tidal
