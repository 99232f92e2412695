// layer_norm / rms_norm kernels, forward and fused backward (dx, dweight, dbias). bytes_per_second
// (GiB/s) counts the (rows, cols) tensors read and written once per iteration.
#include <benchmark/benchmark.h>

#include "tidal/ops/random.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

struct NormCase {
  NormArgs a;
  Tensor x, w, b, y, g, dx, dw, db, mean, rstd, ws;
  NormCase(int64_t rows, int64_t cols, DType dt, bool rms) {
    a = {rows, cols, 1e-5};
    x = randn({rows, cols}, dt);
    g = randn({rows, cols}, dt);
    w = randn({cols}, dt);
    b = randn({cols}, dt);
    y = empty({rows, cols}, dt);
    dx = empty({rows, cols}, dt);
    dw = empty({cols}, dt);
    db = empty({cols}, dt);
    mean = empty({rows});
    rstd = empty({rows});
    ws = empty({device_kernels(Device::cpu()).norm_row_chunks(rows), rms ? 1 : 2, cols});
  }
  int64_t tensor_bytes() const { return x.nbytes(); }
};

DType dtype_arg(int64_t v) { return v == 0 ? DType::f32 : DType::bf16; }

void BM_LayerNormForward(benchmark::State& state) {
  NormCase c(state.range(0), state.range(1), dtype_arg(state.range(2)), false);
  for (auto _ : state)
    device_kernels(Device::cpu())
        .layer_norm_forward(current_stream(Device::cpu()), c.y, c.mean, c.rstd, c.x, c.w, c.b, c.a);
  state.SetBytesProcessed(2 * c.tensor_bytes() * state.iterations());  // read x, write y
}

void BM_LayerNormBackward(benchmark::State& state) {
  NormCase c(state.range(0), state.range(1), dtype_arg(state.range(2)), false);
  device_kernels(Device::cpu())
      .layer_norm_forward(current_stream(Device::cpu()), c.y, c.mean, c.rstd, c.x, c.w, c.b, c.a);
  for (auto _ : state)
    device_kernels(Device::cpu())
        .layer_norm_backward(current_stream(Device::cpu()), c.dx, c.dw, c.db, c.ws, c.g, c.x, c.mean, c.rstd, c.w, c.a);
  state.SetBytesProcessed(3 * c.tensor_bytes() * state.iterations());  // read g and x, write dx
}

void BM_RmsNormForward(benchmark::State& state) {
  NormCase c(state.range(0), state.range(1), dtype_arg(state.range(2)), true);
  for (auto _ : state)
    device_kernels(Device::cpu()).rms_norm_forward(current_stream(Device::cpu()), c.y, c.rstd, c.x, c.w, c.a);
  state.SetBytesProcessed(2 * c.tensor_bytes() * state.iterations());
}

void BM_RmsNormBackward(benchmark::State& state) {
  NormCase c(state.range(0), state.range(1), dtype_arg(state.range(2)), true);
  device_kernels(Device::cpu()).rms_norm_forward(current_stream(Device::cpu()), c.y, c.rstd, c.x, c.w, c.a);
  for (auto _ : state)
    device_kernels(Device::cpu())
        .rms_norm_backward(current_stream(Device::cpu()), c.dx, c.dw, c.ws, c.g, c.x, c.rstd, c.w, c.a);
  state.SetBytesProcessed(3 * c.tensor_bytes() * state.iterations());
}

// Args: rows, cols, dtype (0 f32, 1 bf16).
#define NORM_SHAPES Args({8192, 768, 0})->Args({8192, 768, 1})->Args({2048, 4096, 0})
BENCHMARK(BM_LayerNormForward)->NORM_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LayerNormBackward)->NORM_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RmsNormForward)->NORM_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RmsNormBackward)->NORM_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace tidal
