// The CUDA activation kernels (gelu in both forms, silu, swiglu, geglu; forward and backward) against the CPU
// backend's on the same inputs: odd sizes, every floating dtype, strided operands (halves of a fused
// projection, transposes) and swiglu's backward with either gradient alone.
#include <gtest/gtest.h>

#include <string>

#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/elementwise_compare.h"
#include "tidal/ops/activation.h"

namespace tidal {
namespace {

using testing::ew::cpu_kernels;
using testing::ew::cpu_stream;
using testing::ew::expect_matches;
using testing::ew::gpu_kernels;
using testing::ew::gpu_stream;
using testing::ew::kGpu;
using testing::ew::label;
using testing::ew::to_gpu;
using testing::ew::uniform_cpu;

const int64_t kSizes[] = {1, 7, 1000, 4097, (1 << 18) + 5};
const DType kFloating[] = {DType::f32, DType::bf16, DType::f64};

TEST(CudaActivation, ForwardMatchesTheCpu) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : kFloating)
    for (int64_t n : kSizes) {
      const Tensor x = uniform_cpu({n}, dt, -6, 6, uint64_t(n)), y = uniform_cpu({n}, dt, -2, 2, uint64_t(n) + 1);
      const Tensor xg = to_gpu(x), yg = to_gpu(y);
      expect_matches(gelu(x, GeluApprox::tanh), gelu(xg, GeluApprox::tanh), label("gelu tanh", dt, n));
      expect_matches(gelu(x, GeluApprox::none), gelu(xg, GeluApprox::none), label("gelu erf", dt, n));
      expect_matches(silu(x), silu(xg), label("silu", dt, n));
      expect_matches(swiglu(x, y), swiglu(xg, yg), label("swiglu", dt, n));
      expect_matches(geglu(x, y), geglu(xg, yg), label("geglu", dt, n));
    }
}

TEST(CudaActivation, BackwardMatchesTheCpu) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : kFloating)
    for (int64_t n : kSizes) {
      const Tensor x = uniform_cpu({n}, dt, -6, 6, uint64_t(n) + 2), g = uniform_cpu({n}, dt, -1, 1, uint64_t(n) + 3);
      const Tensor xg = to_gpu(x), gg = to_gpu(g);
      for (bool tanh_approx : {true, false}) {
        Tensor c = empty({n}, dt), d = empty({n}, dt, kGpu);
        cpu_kernels().gelu_backward(cpu_stream(), c, g, x, tanh_approx);
        gpu_kernels().gelu_backward(gpu_stream(), d, gg, xg, tanh_approx);
        expect_matches(c, d, label(tanh_approx ? "gelu tanh backward" : "gelu erf backward", dt, n));
      }
      Tensor c = empty({n}, dt), d = empty({n}, dt, kGpu);
      cpu_kernels().silu_backward(cpu_stream(), c, g, x);
      gpu_kernels().silu_backward(gpu_stream(), d, gg, xg);
      expect_matches(c, d, label("silu backward", dt, n));
    }
}

// glu_backward on both backends; which: 3 both gradients, 1 dgate only, 2 dup only.
void check_glu_backward(const Tensor& g, const Tensor& gate, const Tensor& up, GluActivation act, int which,
                        const std::string& what) {
  const Shape& shape = g.shape();
  const DType dt = g.dtype();
  Tensor cg = which & 1 ? empty(shape, dt) : Tensor(), cu = which & 2 ? empty(shape, dt) : Tensor();
  Tensor dg = which & 1 ? empty(shape, dt, kGpu) : Tensor(), du = which & 2 ? empty(shape, dt, kGpu) : Tensor();
  cpu_kernels().glu_backward(cpu_stream(), cg, cu, g, gate, up, act);
  gpu_kernels().glu_backward(gpu_stream(), dg, du, to_gpu(g), to_gpu(gate), to_gpu(up), act);
  if (which & 1) expect_matches(cg, dg, what + " dgate");
  if (which & 2) expect_matches(cu, du, what + " dup");
}

TEST(CudaActivation, GatedBackwardBothAndEitherGradient) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : kFloating)
    for (int64_t n : kSizes) {
      const Tensor g = uniform_cpu({n}, dt, -1, 1, 5), gate = uniform_cpu({n}, dt, -6, 6, 6);
      const Tensor up = uniform_cpu({n}, dt, -2, 2, 7);
      for (GluActivation act : {GluActivation::silu, GluActivation::gelu_tanh})
        for (int which : {3, 1, 2})
          check_glu_backward(g, gate, up, act, which, label((std::string(glu_name(act)) + " backward").c_str(), dt, n));
    }
}

TEST(CudaActivation, StridedOperands) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : kFloating) {
    // gate and up as the halves of a fused (rows, 2 * cols) projection; x transposed.
    const Tensor fused = uniform_cpu({37, 2 * 129}, dt, -4, 4, 8), fg = to_gpu(fused);
    const Tensor gate = fused.narrow(1, 0, 129), up = fused.narrow(1, 129, 129);
    const Tensor gate_g = fg.narrow(1, 0, 129), up_g = fg.narrow(1, 129, 129);
    expect_matches(swiglu(gate, up), swiglu(gate_g, up_g), label("swiglu halves", dt, 37 * 129));
    expect_matches(geglu(gate, up), geglu(gate_g, up_g), label("geglu halves", dt, 37 * 129));
    expect_matches(gelu(fused.t()).contiguous(), gelu(fg.t()), label("gelu transposed", dt, fused.numel()));
    expect_matches(silu(gate), silu(gate_g), label("silu narrow", dt, 37 * 129));
    const Tensor g = uniform_cpu({37, 129}, dt, -1, 1, 9);
    for (int which : {3, 1, 2}) {
      Tensor cg = which & 1 ? empty({37, 129}, dt) : Tensor(), cu = which & 2 ? empty({37, 129}, dt) : Tensor();
      Tensor dg = which & 1 ? empty({37, 129}, dt, kGpu) : Tensor();
      Tensor du = which & 2 ? empty({37, 129}, dt, kGpu) : Tensor();
      cpu_kernels().glu_backward(cpu_stream(), cg, cu, g, gate, up, GluActivation::silu);
      gpu_kernels().glu_backward(gpu_stream(), dg, du, to_gpu(g), gate_g, up_g, GluActivation::silu);
      if (which & 1) expect_matches(cg, dg, label("swiglu backward halves dgate", dt, 37 * 129));
      if (which & 2) expect_matches(cu, du, label("swiglu backward halves dup", dt, 37 * 129));
    }
  }
}

}  // namespace
}  // namespace tidal
