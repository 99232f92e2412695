// Memory-bound kernels: GB/s = bytes read + written per second (docs/performance.md).
#include <benchmark/benchmark.h>

#include "bench/bench_util.h"

#include "tidal/ops/elementwise.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"

namespace tidal {
namespace {

// Output buffers come from the caching allocator, so steady state measures the kernel, not page faults.
void BM_Add(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = randn({n}), b = randn({n});
  for (auto _ : state) benchmark::DoNotOptimize(add(a, b));
  bench::set_gbps(state, 3.0 * 4 * double(n));
}

void BM_AddBiasBroadcast(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = 768;
  Tensor a = randn({rows, cols}), b = randn({cols});
  for (auto _ : state) benchmark::DoNotOptimize(add(a, b));
  bench::set_gbps(state, 2.0 * 4 * double(rows * cols));
}

void BM_Exp(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = randn({n});
  for (auto _ : state) benchmark::DoNotOptimize(exp(a));
  bench::set_gbps(state, 2.0 * 4 * double(n));
}

void BM_MulScalar(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = randn({n});
  for (auto _ : state) benchmark::DoNotOptimize(mul(a, 0.5));
  bench::set_gbps(state, 2.0 * 4 * double(n));
}

void BM_TransposeCopy(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = randn({n, n});
  for (auto _ : state) benchmark::DoNotOptimize(a.t().contiguous());
  bench::set_gbps(state, 2.0 * 4 * double(n * n));
}

void BM_SumRows(benchmark::State& state) {  // (rows, 768) -> (768): bias gradient
  const int64_t rows = state.range(0);
  Tensor a = randn({rows, 768});
  for (auto _ : state) benchmark::DoNotOptimize(sum(a, {0}));
  bench::set_gbps(state, 4.0 * double(rows * 768));
}

void BM_SumLastDim(benchmark::State& state) {
  const int64_t rows = state.range(0);
  Tensor a = randn({rows, 768});
  for (auto _ : state) benchmark::DoNotOptimize(sum(a, {1}));
  bench::set_gbps(state, 4.0 * double(rows * 768));
}

BENCHMARK(BM_Add)->Arg(1 << 16)->Arg(1 << 22)->Arg(1 << 24)->UseRealTime();
BENCHMARK(BM_AddBiasBroadcast)->Arg(8192)->UseRealTime();
BENCHMARK(BM_Exp)->Arg(1 << 22)->UseRealTime();
BENCHMARK(BM_MulScalar)->Arg(1 << 22)->UseRealTime();
BENCHMARK(BM_TransposeCopy)->Arg(2048)->UseRealTime();
BENCHMARK(BM_SumRows)->Arg(8192)->UseRealTime();
BENCHMARK(BM_SumLastDim)->Arg(8192)->UseRealTime();

}  // namespace
}  // namespace tidal

namespace tidal {
namespace {
// Dropout on eager attention's probabilities (12 heads x 1024 x 1024): mask generation dominates.
void BM_Dropout(benchmark::State& state) {
  Tensor x = rand({12, 1024, 1024});
  for (auto _ : state) benchmark::DoNotOptimize(dropout(x, 0.1));
  bench::set_gbps(state, double(x.numel()) * (4 + 4 + 1));
}
BENCHMARK(BM_Dropout)->UseRealTime()->Unit(benchmark::kMillisecond);
}  // namespace
}  // namespace tidal
