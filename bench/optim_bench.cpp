// The optimizer kernels: the fused AdamW update (f32, and bf16 through an f32 master weight) and the
// f64 sum of squares of gradient clipping. All memory-bound: GB/s counts every byte read and written.
#include <benchmark/benchmark.h>

#include <vector>

#include "bench/bench_util.h"
#include "tidal/ops/random.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

// Args: elements, dtype (0 f32, 1 bf16).
void BM_AdamWStep(benchmark::State& state) {
  const int64_t n = state.range(0);
  const DType dt = state.range(1) == 0 ? DType::f32 : DType::bf16;
  Tensor p = randn({n}, dt), g = randn({n}, dt), m = zeros({n}), v = zeros({n});
  Tensor master = dt == DType::bf16 ? p.to(DType::f32) : Tensor();
  AdamWArgs a;
  a.lr = 1e-3;
  a.weight_decay = 0.01;
  for (auto _ : state) {
    device_kernels(Device::cpu()).adamw_step(current_stream(Device::cpu()), p, g, m, v, master, a);
    ++a.step;
  }
  // p read+write, g read, m and v read+write, master read+write.
  const double bytes = double(n) * (3 * dtype_size(dt) + 4 * 4 + (master.defined() ? 8 : 0));
  bench::set_gbps(state, bytes);
}
BENCHMARK(BM_AdamWStep)
    ->Args({1 << 22, 0})
    ->Args({1 << 22, 1})
    ->Args({1 << 24, 0})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_SumOfSquares(benchmark::State& state) {
  Tensor g = randn({state.range(0)});
  std::vector<double> chunks(size_t((g.numel() + optim::kGradNormChunk - 1) / optim::kGradNormChunk));
  for (auto _ : state) {
    device_kernels(Device::cpu())
        .sum_of_squares(current_stream(Device::cpu()), g, optim::kGradNormChunk, chunks.data());
    benchmark::DoNotOptimize(chunks.data());
  }
  bench::set_gbps(state, double(g.nbytes()));
}
BENCHMARK(BM_SumOfSquares)->Arg(1 << 22)->Arg(1 << 24)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace tidal
