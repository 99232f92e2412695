// Fused cross-entropy: forward (per-row log-sum-exp and loss) and backward (the logits gradient in
// one pass). bytes_per_second (GiB/s) counts the logits read (and the gradient written) once.
#include <benchmark/benchmark.h>

#include "tidal/ops/random.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

// Args: rows, vocab, dtype (0 f32, 1 bf16).
struct LossCase {
  CrossEntropyArgs a;
  Tensor logits, targets, lse, loss;
  explicit LossCase(const benchmark::State& state) {
    a.rows = state.range(0);
    a.vocab = a.row_stride = state.range(1);
    logits = randn({a.rows, a.vocab}, state.range(2) == 0 ? DType::f32 : DType::bf16);
    targets = randint(0, a.vocab, {a.rows});
    lse = empty({a.rows});
    loss = empty({a.rows});
  }
};

void BM_CrossEntropyForward(benchmark::State& state) {
  LossCase c(state);
  for (auto _ : state)
    benchmark::DoNotOptimize(
        device_kernels(Device::cpu())
            .cross_entropy_forward(current_stream(Device::cpu()), c.loss, c.lse, c.logits, c.targets, c.a));
  state.SetBytesProcessed(c.logits.nbytes() * state.iterations());
}

void BM_CrossEntropyBackward(benchmark::State& state) {
  LossCase c(state);
  device_kernels(Device::cpu())
      .cross_entropy_forward(current_stream(Device::cpu()), c.loss, c.lse, c.logits, c.targets, c.a);
  Tensor grad = empty(c.logits.shape(), c.logits.dtype());
  grad.zero_();                                 // first touch outside the timing (fresh pages fault at a few GB/s)
  const double scale = 1.0 / double(c.a.rows);  // mean
  for (auto _ : state)
    device_kernels(Device::cpu())
        .cross_entropy_backward(current_stream(Device::cpu()), grad, c.logits, c.lse, c.targets, Tensor(), scale, c.a);
  state.SetBytesProcessed(2 * c.logits.nbytes() * state.iterations());
}

#define LOSS_SHAPES Args({4096, 32768, 0})->Args({4096, 50304, 0})->Args({4096, 50304, 1})
BENCHMARK(BM_CrossEntropyForward)->LOSS_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CrossEntropyBackward)->LOSS_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace tidal
