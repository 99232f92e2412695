// softmax / log_softmax kernels along the last dim (and one inner dim), forward and backward.
// bytes_per_second (GiB/s) counts every tensor read and written once per iteration.
#include <benchmark/benchmark.h>

#include "tidal/ops/random.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

// Args: outer, n, inner, dtype (0 f32, 1 bf16), log (0/1).
SoftmaxArgs args_of(const benchmark::State& state) {
  return {state.range(0), state.range(1), state.range(2), state.range(4) != 0};
}
DType dtype_of_state(const benchmark::State& state) { return state.range(3) == 0 ? DType::f32 : DType::bf16; }

void BM_SoftmaxForward(benchmark::State& state) {
  const SoftmaxArgs a = args_of(state);
  Tensor x = randn({a.outer, a.n, a.inner}, dtype_of_state(state)), y = empty(x.shape(), x.dtype());
  for (auto _ : state) device_kernels(Device::cpu()).softmax_forward(current_stream(Device::cpu()), y, x, a);
  state.SetBytesProcessed(2 * x.nbytes() * state.iterations());
}

void BM_SoftmaxBackward(benchmark::State& state) {
  const SoftmaxArgs a = args_of(state);
  Tensor x = randn({a.outer, a.n, a.inner}, dtype_of_state(state)), y = empty(x.shape(), x.dtype());
  Tensor g = randn(x.shape(), x.dtype()), dx = empty(x.shape(), x.dtype());
  device_kernels(Device::cpu()).softmax_forward(current_stream(Device::cpu()), y, x, a);
  for (auto _ : state) device_kernels(Device::cpu()).softmax_backward(current_stream(Device::cpu()), dx, g, y, a);
  state.SetBytesProcessed(3 * x.nbytes() * state.iterations());  // read g and y, write dx
}

#define SOFTMAX_SHAPES              \
  Args({8192, 768, 1, 0, 0})        \
      ->Args({8192, 768, 1, 1, 0})  \
      ->Args({8192, 768, 1, 0, 1})  \
      ->Args({16, 512, 1024, 0, 0}) \
      ->Args({8192, 1024, 1, 0, 0})
BENCHMARK(BM_SoftmaxForward)->SOFTMAX_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SoftmaxBackward)->SOFTMAX_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace tidal
