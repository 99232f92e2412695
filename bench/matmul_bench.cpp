// GEMM through tidal's matmul/linear versus the BLAS called directly (docs/performance.md).
#include <benchmark/benchmark.h>

#include "bench/bench_util.h"

#include "tidal/backend/kernels.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"

namespace tidal {
namespace {

// The device's matmul kernel alone (no op layer, no allocation): C (m x n) = A (m x k) @ B^T (n x k)
void BM_MatmulKernel(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  Tensor a = randn({m, k}), b = randn({n, k}), c = empty({m, n});
  const Tensor bt = b.transpose(0, 1);  // (k, n) view
  Kernels& kernels = device_kernels(Device::cpu());
  for (auto _ : state) {
    kernels.matmul(c, a, bt, 1.0, 0.0);
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

#define GEMM_SHAPES              \
  Args({4096, 3072, 768})        \
      ->Args({4096, 768, 3072})  \
      ->Args({4096, 768, 768})   \
      ->Args({1024, 1024, 1024}) \
      ->Args({2048, 2048, 2048})
BENCHMARK(BM_MatmulKernel)->GEMM_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Linear)->GEMM_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_BatchedMatmul)->Args({12, 1024, 64})->Args({48, 256, 64})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace tidal
