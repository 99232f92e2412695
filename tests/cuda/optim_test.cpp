// The CUDA optimizer kernels against the CPU backend: the gradient norm's f64 partial sums (the CPU's
// chunks and order: equal to 1e-12 relative) and AdamW over several steps (f32 rounding), f32, bf16
// with its f32 master copy, and f64. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

Tensor to_cuda(const Tensor& t) { return from_vector(t.to_vector<double>(), t.shape(), t.dtype(), Device::cuda(0)); }

std::vector<double> normal_values(int64_t n, double scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = normal(rng);
  return v;
}

TEST(CudaOptim, SumOfSquaresPartialsMatchCpu) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    for (int64_t n : {1, 7, 1000, 4097, 16384, 16385, 1000003}) {
      Tensor g = from_vector(normal_values(n, 3.0, uint32_t(n)), {n}, dt);
      const std::vector<double> a = optim::sum_of_squares_chunks(g), b = optim::sum_of_squares_chunks(to_cuda(g));
      ASSERT_EQ(a.size(), b.size());
      for (size_t c = 0; c < a.size(); ++c) EXPECT_NEAR(a[c], b[c], 1e-12 * std::abs(a[c])) << n << " chunk " << c;
    }
  }
}

void expect_close(const Tensor& cpu, const Tensor& cuda, double rel, const char* what) {
  const std::vector<double> a = cpu.to_vector<double>(), b = cuda.to_vector<double>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], rel * std::max(1e-3, std::abs(a[i]))) << what << " at " << i;
}

// Five steps of the same AdamW update on each device, from the same state.
void run_adamw(DType dt, int64_t n, double rel) {
  const DType st = dt == DType::f64 ? DType::f64 : DType::f32;
  Tensor p = from_vector(normal_values(n, 1.0, 1), {n}, dt);
  Tensor m = zeros({n}, st), v = zeros({n}, st);
  Tensor w = dt == DType::bf16 ? from_vector(p.to_vector<double>(), {n}, DType::f32) : Tensor();
  Tensor pc = to_cuda(p), mc = to_cuda(m), vc = to_cuda(v), wc = w.defined() ? to_cuda(w) : Tensor();
  Kernels& cpu = device_kernels(Device::cpu());
  Kernels& cuda = device_kernels(Device::cuda(0));
  AdamWArgs a;
  a.lr = 1e-2;
  a.weight_decay = 0.1;
  for (int step = 1; step <= 5; ++step) {
    a.step = step;
    Tensor g = from_vector(normal_values(n, 0.5, uint32_t(100 + step)), {n}, dt);
    Tensor gc = to_cuda(g);
    cpu.adamw_step(current_stream(Device::cpu()), p, g, m, v, w, a);
    cuda.adamw_step(current_stream(Device::cuda(0)), pc, gc, mc, vc, wc, a);
  }
  expect_close(m, mc, rel, "exp_avg");
  expect_close(v, vc, rel, "exp_avg_sq");
  if (w.defined()) expect_close(w, wc, rel, "master");
  expect_close(p, pc, dt == DType::bf16 ? 1e-2 : rel, "param");
}

TEST(CudaOptim, AdamWMatchesCpuOverSteps) {
  TIDAL_REQUIRE_CUDA();
  for (int64_t n : {1, 7, 1000, 4097}) {
    run_adamw(DType::f32, n, 1e-5);
    run_adamw(DType::bf16, n, 1e-5);
    run_adamw(DType::f64, n, 1e-12);
  }
}

}  // namespace
}  // namespace tidal
