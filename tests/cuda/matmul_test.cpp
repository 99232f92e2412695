// The CUDA matmul kernel (cuBLASLt) against the CPU backend's on the same inputs: batched, broadcast,
// transposed and non-uniformly strided views, f32 / bf16 (bf16 or f32 out) / f64, alpha and beta; the
// product with its bias (cuBLASLt's bias epilogue) and linear. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tidal/ops/matmul.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

const Device kGpu = Device::cuda(0);

std::vector<double> random_values(int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = u(gen);
  return v;
}

// The same values as a contiguous tensor on the CPU and on the GPU.
struct Pair {
  Tensor cpu, gpu;
};
Pair random_pair(const Shape& shape, DType dtype, unsigned seed) {
  const std::vector<double> v = random_values(shape.numel(), seed);
  return {from_vector(v, shape, dtype), from_vector(v, shape, dtype, kGpu)};
}

double tolerance(DType operands, DType out) {
  if (operands == DType::f64) return 1e-12;
  if (out == DType::bf16) return 1e-2;
  return operands == DType::bf16 ? 1e-4 : 2e-5;
}

// |gpu - cpu| <= tol * max(1, max |cpu|) elementwise.
void expect_close(const Tensor& gpu, const Tensor& cpu, double tol) {
  const std::vector<double> g = gpu.to_vector<double>(), c = cpu.to_vector<double>();
  ASSERT_EQ(g.size(), c.size());
  double scale = 1;
  for (double x : c) scale = std::max(scale, std::abs(x));
  for (size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(g[i], c[i], tol * scale) << "element " << i;
}

using View = std::function<Tensor(const Tensor&)>;
Tensor same(const Tensor& t) { return t; }

// Runs out = alpha * view_a(a) @ view_b(b) + beta * out on both backends and compares.
void check(const Shape& a_base, const View& va, const Shape& b_base, const View& vb, const Shape& out_shape,
           DType dtype, DType out_dtype, double alpha, double beta) {
  const Pair a = random_pair(a_base, dtype, 1), b = random_pair(b_base, dtype, 2);
  const Pair out = random_pair(out_shape, out_dtype, 3);
  device_kernels(Device::cpu()).matmul(current_stream(Device::cpu()), out.cpu, va(a.cpu), vb(b.cpu), alpha, beta);
  device_kernels(kGpu).matmul(current_stream(kGpu), out.gpu, va(a.gpu), vb(b.gpu), alpha, beta);
  expect_close(out.gpu, out.cpu, tolerance(dtype, out_dtype));
}

Tensor t_last(const Tensor& t) { return t.transpose(-1, -2); }

TEST(CudaMatmul, PlainAndOddSizes) {
  TIDAL_REQUIRE_CUDA();
  check({7, 5}, same, {5, 3}, same, {7, 3}, DType::f32, DType::f32, 1, 0);
  check({1, 1}, same, {1, 1}, same, {1, 1}, DType::f32, DType::f32, 1, 0);
  check({1, 7}, same, {7, 1}, same, {1, 1}, DType::f32, DType::f32, 1, 0);
  check({1000, 4097}, same, {4097, 7}, same, {1000, 7}, DType::f32, DType::f32, 1, 0);
  check({3, 0}, same, {0, 4}, same, {3, 4}, DType::f32, DType::f32, 1, 2);  // k = 0: out = beta * out
  check({3, 0}, same, {0, 4}, same, {3, 4}, DType::f32, DType::f32, 1, 0);
}

TEST(CudaMatmul, AlphaBetaAndBatches) {
  TIDAL_REQUIRE_CUDA();
  check({4, 33, 17}, same, {4, 17, 9}, same, {4, 33, 9}, DType::f32, DType::f32, 0.5, 2);
  check({6, 50, 64}, same, {64, 70}, same, {6, 50, 70}, DType::f32, DType::f32, 1, 1);     // rows fold
  check({3, 1, 8, 6}, same, {5, 6, 4}, same, {3, 5, 8, 4}, DType::f32, DType::f32, 1, 0);  // broadcast
  check({8, 6}, same, {2, 3, 6, 5}, same, {2, 3, 8, 5}, DType::f32, DType::f32, -1, 0.5);
}

TEST(CudaMatmul, TransposedAndStridedViews) {
  TIDAL_REQUIRE_CUDA();
  check({16, 40}, t_last, {2, 30, 16}, t_last, {2, 40, 30}, DType::f32, DType::f32, 1, 0);
  // Batch dims (4, 5) with strides (96, 384): not one strided batch, a host loop over the first.
  check(
      {5, 4, 12, 8}, [](const Tensor& t) { return t.transpose(0, 1); }, {4, 5, 8, 3}, same, {4, 5, 12, 3}, DType::f32,
      DType::f32, 1, 0);
  // A column slice (row stride 20 > cols) and a transposed slice.
  check(
      {9, 20}, [](const Tensor& t) { return t.narrow(1, 3, 11); }, {13, 11},
      [](const Tensor& t) { return t.narrow(0, 1, 12).transpose(0, 1).narrow(0, 0, 11); }, {9, 12}, DType::f32,
      DType::f32, 1, 0);
}

TEST(CudaMatmul, Bf16AndF64) {
  TIDAL_REQUIRE_CUDA();
  for (DType out : {DType::bf16, DType::f32}) {
    check({4, 33, 17}, same, {4, 17, 9}, same, {4, 33, 9}, DType::bf16, out, 1, 0);
    check({64, 96}, t_last, {64, 128}, same, {96, 128}, DType::bf16, out, 0.5, 1);
    check({2, 7, 130}, same, {130, 5}, same, {2, 7, 5}, DType::bf16, out, 1, 0);
  }
  check({4, 33, 17}, same, {4, 17, 9}, same, {4, 33, 9}, DType::f64, DType::f64, 0.5, 2);
  check({16, 40}, t_last, {2, 30, 16}, t_last, {2, 40, 30}, DType::f64, DType::f64, 1, 0);
}

TEST(CudaMatmul, OperandLayoutRuleIsTheCpus) {
  TIDAL_REQUIRE_CUDA();
  const Kernels &cpu = device_kernels(Device::cpu()), &gpu = device_kernels(kGpu);
  const int64_t cases[][4] = {{4, 5, 5, 1}, {4, 5, 1, 4}, {4, 5, 10, 2}, {4, 5, 3, 1}, {1, 5, 0, 1},
                              {4, 1, 1, 0}, {4, 5, 8, 1}, {4, 5, 1, 2},  {1, 1, 7, 9}, {3, 3, 2, 6}};
  for (const auto& c : cases)
    EXPECT_EQ(gpu.matmul_operand_ok(c[0], c[1], c[2], c[3]), cpu.matmul_operand_ok(c[0], c[1], c[2], c[3]))
        << c[0] << " " << c[1] << " " << c[2] << " " << c[3];
}

// --- the product with its bias (Kernels::matmul_bias): cuBLASLt's bias epilogue against the default
// (the bias copied into out, then the product added) on the GPU and against the CPU's. Where the
// epilogue does not apply (f64, a batch that does not fold into rows) the GPU runs the default: the
// same bytes.

std::vector<unsigned char> host_bytes(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  const auto* p = static_cast<const unsigned char*>(h.raw_data());
  return {p, p + h.nbytes()};
}

// out (..., m, n) = view(a) (..., m, k) @ wᵀ (k, n) + bias (n).
void check_bias(const Shape& a_base, const View& va, int64_t n, DType dt, bool fallback) {
  const Pair a = random_pair(a_base, dt, 4);
  const int64_t k = va(a.cpu).size(-1);
  const Pair w = random_pair({n, k}, dt, 5);  // (n, k)
  const Pair bias = random_pair({n}, dt, 6);  // (n)
  Shape out_shape = va(a.cpu).shape();
  out_shape[out_shape.size() - 1] = n;
  const Tensor fused = zeros(out_shape, dt, kGpu), plain = zeros(out_shape, dt, kGpu);  // (..., m, n)
  const Tensor host = zeros(out_shape, dt);                                             // (..., m, n)
  Kernels& gpu = device_kernels(kGpu);
  Stream& stream = current_stream(kGpu);
  gpu.matmul_bias(stream, fused, va(a.gpu), w.gpu.t(), bias.gpu);
  gpu.Kernels::matmul_bias(stream, plain, va(a.gpu), w.gpu.t(), bias.gpu);
  device_kernels(Device::cpu()).matmul_bias(current_stream(Device::cpu()), host, va(a.cpu), w.cpu.t(), bias.cpu);
  SCOPED_TRACE(::testing::Message() << dt << " " << a_base << " -> n " << n);
  expect_close(fused, plain, tolerance(dt, dt));
  expect_close(fused, host, tolerance(dt, dt));
  if (fallback) {
    EXPECT_EQ(host_bytes(fused), host_bytes(plain)) << "the default's bytes where no epilogue applies";
  }
}

TEST(CudaMatmul, BiasEpilogueMatchesCopyThenProduct) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16}) {
    check_bias({7, 5}, same, 3, dt, false);
    check_bias({1, 1}, same, 1, dt, false);
    check_bias({1, 7}, same, 1, dt, false);
    check_bias({4, 130}, same, 1, dt, false);
    check_bias({2, 9, 33}, same, 17, dt, false);   // rows fold: one (18, 33) product
    check_bias({6, 50, 64}, same, 70, dt, false);  // rows fold
    check_bias({1000, 257}, same, 129, dt, false);
    check_bias({64, 96}, same, 128, dt, false);
    check_bias({3, 0}, same, 4, dt, true);  // k = 0: out = bias, no product
    // A batch that does not fold into rows (a's batch stride is not rows * row stride): the default.
    check_bias(
        {5, 4, 12, 8}, [](const Tensor& t) { return t.transpose(0, 1); }, 3, dt, true);
  }
  check_bias({7, 5}, same, 3, DType::f64, true);  // no f64 bias epilogue in cuBLASLt: the default
  check_bias({2, 9, 33}, same, 17, DType::f64, true);
}

// linear (ops/matmul.h) runs matmul_bias: on the GPU as on the CPU, 1-D and 3-D inputs.
TEST(CudaMatmul, LinearWithBiasMatchesCpu) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16}) {
    for (const Shape& xs : {Shape{33}, Shape{2, 9, 33}}) {
      const Pair x = random_pair(xs, dt, 7), w = random_pair({17, 33}, dt, 8), b = random_pair({17}, dt, 9);
      const Tensor gpu = linear(x.gpu, w.gpu, b.gpu), cpu = linear(x.cpu, w.cpu, b.cpu);  // (..., 17)
      ASSERT_EQ(gpu.shape(), cpu.shape());
      expect_close(gpu, cpu, tolerance(dt, dt));
    }
  }
}

}  // namespace
}  // namespace tidal
