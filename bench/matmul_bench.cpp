// GEMM through tidal's matmul/linear versus the BLAS called directly (docs/performance.md).
#include <benchmark/benchmark.h>

#include "bench/bench_util.h"

#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

// The device's matmul kernel alone (no op layer, no allocation): C (m x n) = A (m x k) @ B^T (n x k)
void BM_MatmulKernel(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  Tensor a = randn({m, k}), b = randn({n, k}), c = empty({m, n});
  const Tensor bt = b.transpose(0, 1);  // (k, n) view
  Kernels& kernels = device_kernels(Device::cpu());
  for (auto _ : state) {
    kernels.matmul(current_stream(Device::cpu()), c, a, bt, 1.0, 0.0);
    benchmark::DoNotOptimize(c.raw_data());
  }
  bench::set_gflops(state, 2.0 * double(m * n * k));
}

// One GEMM of a linear layer, M x N x K, in the layout the training step runs it in (range 3):
// 0 forward y = x W^T, 1 input gradient dx = dy W, 2 weight gradient dW = dy^T x (K = the rows).
// Operands in `in` (f32 or bf16, f32 accumulation), C in `out`; no op layer, no allocation.
// separate_beta: beta = 1 as a second pass (C += T after T = A B) instead of oneDNN's sum post-op.
void gemm_layout(benchmark::State& state, DType in, DType out, double beta = 0.0, bool separate_beta = false) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2), layout = state.range(3);
  Tensor a = layout == 2 ? randn({k, m}).to(in).t() : randn({m, k}).to(in);
  Tensor b = layout == 0 ? randn({n, k}).to(in).t() : randn({k, n}).to(in);
  Tensor c = empty({m, n}, out);
  Kernels& kernels = device_kernels(Device::cpu());
  Tensor t = separate_beta ? empty({m, n}, out) : Tensor();
  c.zero_();
  auto run = [&] {
    if (!separate_beta) return kernels.matmul(current_stream(Device::cpu()), c, a, b, 1.0, beta);
    kernels.matmul(current_stream(Device::cpu()), t, a, b, 1.0, 0.0);
    kernels.add_inplace(current_stream(Device::cpu()), c, t, 1.0);
  };
  run();  // warm-up: creates and caches oneDNN's primitive
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(c.raw_data());
  }
  bench::set_gflops(state, 2.0 * double(m) * double(n) * double(k));
}
void BM_GemmF32(benchmark::State& state) { gemm_layout(state, DType::f32, DType::f32); }
void BM_GemmBf16(benchmark::State& state) { gemm_layout(state, DType::bf16, DType::bf16); }
void BM_GemmBf16F32Out(benchmark::State& state) { gemm_layout(state, DType::bf16, DType::f32); }
// beta = 1 (a bias copied into C first, gradient accumulation): oneDNN's sum post-op.
void BM_GemmBf16Beta1(benchmark::State& state) { gemm_layout(state, DType::bf16, DType::bf16, 1.0); }
void BM_GemmBf16F32OutBeta1(benchmark::State& state) { gemm_layout(state, DType::bf16, DType::f32, 1.0); }
void BM_GemmBf16Beta1Separate(benchmark::State& state) { gemm_layout(state, DType::bf16, DType::bf16, 1.0, true); }

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
// GPT-2 124M at 2048 tokens (batch 4 x seq 512): attention projections, MLP up and down, LM head;
// forward (0), input gradient (1), weight gradient (2).
#define GPT2_124M_GEMMS                                    \
  Args({2048, 768, 768, 0}) /* attention out projection */ \
      ->Args({2048, 768, 768, 1})                          \
      ->Args({768, 768, 2048, 2})                          \
      ->Args({2048, 3072, 768, 0}) /* MLP up */            \
      ->Args({2048, 768, 3072, 1})                         \
      ->Args({3072, 768, 2048, 2})                         \
      ->Args({2048, 768, 3072, 0}) /* MLP down */          \
      ->Args({2048, 3072, 768, 1})                         \
      ->Args({768, 3072, 2048, 2})                         \
      ->Args({2048, 50257, 768, 0}) /* LM head */          \
      ->Args({2048, 768, 50257, 1})                        \
      ->Args({50257, 768, 2048, 2})
BENCHMARK(BM_GemmF32)->GPT2_124M_GEMMS->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GemmBf16)->GPT2_124M_GEMMS->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GemmBf16F32Out)->GPT2_124M_GEMMS->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GemmBf16Beta1)->GPT2_124M_GEMMS->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GemmBf16F32OutBeta1)->GPT2_124M_GEMMS->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GemmBf16Beta1Separate)->GPT2_124M_GEMMS->Unit(benchmark::kMillisecond)->UseRealTime();
// One expert of a 32-expert top-4 MoE layer at 1024 tokens (hidden 512, expert FFN 256): ~128 rows each.
#define EXPERT_GEMMS                        \
  Args({128, 256, 512, 0}) /* gate or up */ \
      ->Args({128, 512, 256, 1})            \
      ->Args({256, 512, 128, 2})            \
      ->Args({128, 512, 256, 0}) /* down */ \
      ->Args({128, 256, 512, 1})            \
      ->Args({512, 256, 128, 2})
BENCHMARK(BM_GemmF32)->Name("BM_ExpertGemmF32")->EXPERT_GEMMS->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_GemmBf16)->Name("BM_ExpertGemmBf16")->EXPERT_GEMMS->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_BatchedMatmul)->Args({12, 1024, 64})->Args({48, 256, 64})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace tidal
