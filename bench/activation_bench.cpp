// gelu / silu / swiglu kernels, forward and fused backward. bytes_per_second (GiB/s) counts every
// tensor read and written once per iteration.
#include <benchmark/benchmark.h>

#include "tidal/ops/random.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

DType dtype_arg(int64_t v) { return v == 0 ? DType::f32 : DType::bf16; }

// Args: rows, cols, dtype (0 f32, 1 bf16), variant (gelu: 0 tanh, 1 erf).
void BM_GeluForward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  Tensor x = randn({state.range(0), state.range(1)}, dt), y = empty(x.shape(), dt);
  for (auto _ : state)
    device_kernels(Device::cpu()).gelu_forward(current_stream(Device::cpu()), y, x, state.range(3) == 0);
  state.SetBytesProcessed(2 * x.nbytes() * state.iterations());
}

void BM_GeluBackward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  Tensor x = randn({state.range(0), state.range(1)}, dt), g = randn(x.shape(), dt), dx = empty(x.shape(), dt);
  for (auto _ : state)
    device_kernels(Device::cpu()).gelu_backward(current_stream(Device::cpu()), dx, g, x, state.range(3) == 0);
  state.SetBytesProcessed(3 * x.nbytes() * state.iterations());
}

void BM_SiluForward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  Tensor x = randn({state.range(0), state.range(1)}, dt), y = empty(x.shape(), dt);
  for (auto _ : state) device_kernels(Device::cpu()).silu_forward(current_stream(Device::cpu()), y, x);
  state.SetBytesProcessed(2 * x.nbytes() * state.iterations());
}

void BM_SwigluForward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  Tensor gate = randn({state.range(0), state.range(1)}, dt), up = randn(gate.shape(), dt), y = empty(gate.shape(), dt);
  for (auto _ : state)
    device_kernels(Device::cpu()).glu_forward(current_stream(Device::cpu()), y, gate, up, GluActivation::silu);
  state.SetBytesProcessed(3 * gate.nbytes() * state.iterations());
}

void BM_SwigluBackward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  Tensor gate = randn({state.range(0), state.range(1)}, dt), up = randn(gate.shape(), dt), g = randn(gate.shape(), dt);
  Tensor dgate = empty(gate.shape(), dt), dup = empty(gate.shape(), dt);
  for (auto _ : state)
    device_kernels(Device::cpu())
        .glu_backward(current_stream(Device::cpu()), dgate, dup, g, gate, up, GluActivation::silu);
  state.SetBytesProcessed(5 * gate.nbytes() * state.iterations());  // read g, gate, up; write dgate, dup
}

BENCHMARK(BM_GeluForward)
    ->Args({8192, 768, 0, 0})
    ->Args({8192, 768, 0, 1})
    ->Args({8192, 768, 1, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_GeluBackward)
    ->Args({8192, 768, 0, 0})
    ->Args({8192, 768, 0, 1})
    ->Args({8192, 768, 1, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_SiluForward)->Args({8192, 768, 0, 0})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SwigluForward)
    ->Args({8192, 768, 0, 0})
    ->Args({8192, 768, 1, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_SwigluBackward)
    ->Args({8192, 768, 0, 0})
    ->Args({8192, 768, 1, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace tidal
