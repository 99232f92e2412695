// Memory-bound kernels: GB/s = bytes read + written per second (docs/performance.md).
#include <benchmark/benchmark.h>

#include "bench/bench_util.h"

#include "tidal/ops/elementwise.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"

namespace tidal {
namespace {

// The second argument, where there is one: 0 f32, 1 bf16 (loaded into f32, rounded back).
DType dtype_arg(const benchmark::State& state) { return state.range(1) == 1 ? DType::bf16 : DType::f32; }

// Output buffers come from the caching allocator, so steady state measures the kernel, not page faults.
void BM_Add(benchmark::State& state) {
  const int64_t n = state.range(0);
  const DType t = dtype_arg(state);
  Tensor a = randn({n}).to(t), b = randn({n}).to(t);
  for (auto _ : state) benchmark::DoNotOptimize(add(a, b));
  bench::set_gbps(state, 3.0 * double(dtype_size(t)) * double(n));
}

void BM_AddBiasBroadcast(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = 768;
  const DType t = dtype_arg(state);
  Tensor a = randn({rows, cols}).to(t), b = randn({cols}).to(t);
  for (auto _ : state) benchmark::DoNotOptimize(add(a, b));
  bench::set_gbps(state, 2.0 * double(dtype_size(t)) * double(rows * cols));
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

// bf16 -> f32 (Tensor::to), as --bf16's gradient sums take each bf16 gradient: an MoE expert's 128K elements
// and a large tensor's 16M.
void BM_Bf16ToF32(benchmark::State& state) {
  const Tensor x = randn({state.range(0)}).to(DType::bf16);
  for (auto _ : state) benchmark::DoNotOptimize(x.to(DType::f32));
  bench::set_gbps(state, double(x.numel()) * 6);
}

BENCHMARK(BM_Bf16ToF32)->Arg(1 << 17)->Arg(1 << 24)->UseRealTime();
BENCHMARK(BM_Add)->ArgsProduct({{1 << 16, 1 << 22, 1 << 24}, {0, 1}})->UseRealTime();
BENCHMARK(BM_AddBiasBroadcast)->ArgsProduct({{8192}, {0, 1}})->UseRealTime();
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
