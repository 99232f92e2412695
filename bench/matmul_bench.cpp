// GEMM through tidal's matmul/linear versus the BLAS called directly (docs/performance.md).
#include <benchmark/benchmark.h>

#include "bench/bench_util.h"

#include "tidal/backend/cpu/blas.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"

namespace tidal {
namespace {

// Raw BLAS: C (m x n) = A (m x k) @ B^T (n x k)
void BM_BlasSgemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  Tensor a = randn({m, k}), b = randn({n, k}), c = empty({m, n});
  for (auto _ : state) {
    cpu::blas::gemm(false, true, m, n, k, 1.f, a.data<float>(), k, b.data<float>(), k, 0.f, c.data<float>(), n);
    benchmark::DoNotOptimize(c.data<float>());
  }
  bench::set_gflops(state, 2.0 * double(m * n * k));
}

// tidal::linear: x (m, k) @ w^T with w (n, k), allocation included.
void BM_Linear(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  Tensor x = randn({m, k}), w = randn({n, k});
  for (auto _ : state) benchmark::DoNotOptimize(linear(x, w));
  bench::set_gflops(state, 2.0 * double(m * n * k));
}

// Attention-style batched product: (B*H, T, D) @ (B*H, D, T).
void BM_BatchedMatmul(benchmark::State& state) {
  const int64_t bh = state.range(0), t = state.range(1), d = state.range(2);
  Tensor q = randn({bh, t, d}), k = randn({bh, t, d});
  for (auto _ : state) benchmark::DoNotOptimize(matmul(q, k.mT()));
  bench::set_gflops(state, 2.0 * double(bh * t * t * d));
}

#define GEMM_SHAPES Args({4096, 3072, 768})->Args({4096, 768, 3072})->Args({4096, 768, 768})->Args({1024, 1024, 1024})->Args({2048, 2048, 2048})
BENCHMARK(BM_BlasSgemm)->GEMM_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Linear)->GEMM_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_BatchedMatmul)->Args({12, 1024, 64})->Args({48, 256, 64})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace tidal
