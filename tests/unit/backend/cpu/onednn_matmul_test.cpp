// The bf16 GEMM (oneDNN's matmul primitive behind cpu::matmul_kernel) against an f64 reference
// computed from the same bf16 inputs.
//
// Tolerance, per output element (u = 2^-24, f32's unit roundoff; u_bf16 = 2^-8, bf16's):
// - bf16 x bf16 products are exact in f32 (8-bit significands, 16-bit product), so the only errors
//   of the f32-out path are the roundings of the f32 sums: at most k-1 additions into the
//   accumulator in any order (blocking, FMA pairs of vdpbf16ps), plus the alpha scale, the beta
//   product and the final add of the sum post-op: k+2 roundings. Each costs at most u times the
//   magnitude of what it rounds, bounded by s = |alpha| Σ_p |a_ip||b_pj| + |beta||c0_ij|, so
//   |got - exact| <= γ_{k+2} s with γ_n = n u / (1 - n u) (Higham, Accuracy and Stability, 3.1).
// - A bf16 out rounds that f32 value once more: + u_bf16 (|exact| + γ_{k+2} s).
// The f64 reference's own error (~k 2^-53 s) is far below these and ignored.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tidal/backend/cpu/onednn_matmul.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

constexpr double kU32 = 0x1p-24, kUbf16 = 0x1p-8;

double gamma_n(int64_t n) { return double(n) * kU32 / (1.0 - double(n) * kU32); }

// Elements of a (..., r, c) tensor as f64, contiguous, in the tensor's logical order.
std::vector<double> values(const Tensor& t) {
  Tensor c = t.to(DType::f64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

// out (B, m, n) = alpha a (B, m, k) @ b (B, k, n) + beta c0, checked element by element against the
// bound above. Operands are 3-D here (batch 1 for plain matrices); returns the worst ratio err/bound.
double check_against_reference(const Tensor& out, const Tensor& c0, const Tensor& a, const Tensor& b, double alpha,
                               double beta) {
  const int64_t nb = out.size(0), m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const std::vector<double> av = values(a.expand(Shape{nb, m, k})), bv = values(b.expand(Shape{nb, k, n}));
  const std::vector<double> cv = values(c0), got = values(out);
  const bool bf16_out = out.dtype() == DType::bf16;
  double worst = 0;
  for (int64_t q = 0; q < nb; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0, s = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = av[size_t((q * m + i) * k + p)], y = bv[size_t((q * k + p) * n + j)];
          exact += x * y;
          s += std::abs(x * y);
        }
        const size_t o = size_t((q * m + i) * n + j);
        exact = alpha * exact + beta * cv[o];
        s = std::abs(alpha) * s + std::abs(beta) * std::abs(cv[o]);
        const double f32_err = gamma_n(k + 2) * s;
        const double bound = bf16_out ? f32_err + kUbf16 * (std::abs(exact) + f32_err) : f32_err;
        const double err = std::abs(got[o] - exact);
        EXPECT_LE(err, bound) << "batch " << q << " (" << i << ", " << j << ") m=" << m << " n=" << n << " k=" << k
                              << " got " << got[o] << " exact " << exact;
        if (bound > 0) worst = std::max(worst, err / bound);
      }
  return worst;
}

struct Case {
  int64_t m, n, k;
  bool trans_a, trans_b;
  double alpha, beta;
  DType out;
};

// A (rows x cols) bf16 matrix, stored transposed when `trans`, with a row stride wider than the rows
// (a narrowed view) when `padded`.
Tensor operand(int64_t rows, int64_t cols, bool trans, bool padded) {
  const int64_t pad = padded ? 3 : 0;
  if (trans) return randn({cols, rows + pad}).to(DType::bf16).narrow(1, 0, rows).t();
  return randn({rows, cols + pad}).to(DType::bf16).narrow(1, 0, cols);
}

void run_case(const Case& c, bool padded) {
  SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
               " ta=" + std::to_string(c.trans_a) + " tb=" + std::to_string(c.trans_b) +
               " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta) +
               " out=" + std::string(dtype_name(c.out)) + (padded ? " padded" : ""));
  Tensor a = operand(c.m, c.k, c.trans_a, padded), b = operand(c.k, c.n, c.trans_b, padded);
  ASSERT_TRUE(device_kernels(Device::cpu()).matmul_operand_ok(c.m, c.k, a.stride(0), a.stride(1)));
  Tensor c0 = randn({c.m, c.n}).to(c.out);
  Tensor out = c0.clone();
  device_kernels(Device::cpu()).matmul(current_stream(Device::cpu()), out, a, b, c.alpha, c.beta);
  check_against_reference(out.unsqueeze(0), c0.unsqueeze(0), a.unsqueeze(0), b.unsqueeze(0), c.alpha, c.beta);
}

TEST(OnednnMatmul, Bf16MatchesF64ReferenceWithinTheBound) {
  manual_seed(11);
  const std::vector<Case> cases = {
      {1, 1, 1, false, false, 1.0, 0.0, DType::bf16},     {7, 5, 1, false, false, 1.0, 0.0, DType::f32},
      {7, 5, 1, true, true, 1.0, 1.0, DType::bf16},       {33, 17, 65, false, false, 1.0, 0.0, DType::bf16},
      {33, 17, 65, true, false, 0.75, 0.0, DType::f32},   {33, 17, 65, false, true, 1.0, 1.0, DType::f32},
      {33, 17, 65, true, true, 1.0, -0.5, DType::bf16},   {129, 67, 300, false, true, 1.0, 1.0, DType::bf16},
      {129, 67, 300, true, false, 2.0, 0.25, DType::f32}, {64, 96, 1000, false, false, 1.0, 0.0, DType::f32},
      {64, 96, 1000, false, true, 1.0, 0.0, DType::bf16},
  };
  for (const Case& c : cases) {
    run_case(c, false);
    run_case(c, true);
  }
}

TEST(OnednnMatmul, BatchedAndBroadcastBf16) {
  manual_seed(12);
  // Folded rows: a (3, 20, 40) @ b (40, 30) is one (60 x 40) product.
  Tensor a = randn({3, 20, 40}).to(DType::bf16), b = randn({40, 30}).to(DType::bf16);
  Tensor out = zeros({3, 20, 30}, DType::bf16);
  device_kernels(Device::cpu()).matmul(current_stream(Device::cpu()), out, a, b, 1.0, 0.0);
  check_against_reference(out, out.clone(), a, b.unsqueeze(0), 1.0, 0.0);
  // One product per batch entry, transposed b views (attention's q @ k^T), f32 out, beta = 1.
  Tensor q = randn({6, 31, 16}).to(DType::bf16), kt = randn({6, 29, 16}).to(DType::bf16).transpose(1, 2);
  Tensor c0 = randn({6, 31, 29});
  Tensor o32 = c0.clone();
  device_kernels(Device::cpu()).matmul(current_stream(Device::cpu()), o32, q, kt, 0.5, 1.0);
  check_against_reference(o32, c0, q, kt, 0.5, 1.0);
  // Products under 32 MFLOP run one per thread inside a parallel region, each on a primitive that
  // oneDNN runs single-threaded there: large enough here for its brgemm kernels.
  Tensor a2 = randn({4, 256, 128}).to(DType::bf16), b2 = randn({4, 128, 256}).to(DType::bf16);
  Tensor c2 = zeros({4, 256, 256}, DType::bf16);
  device_kernels(Device::cpu()).matmul(current_stream(Device::cpu()), c2, a2, b2, 1.0, 0.0);
  check_against_reference(c2, c2.clone(), a2, b2, 1.0, 0.0);
  EXPECT_NE(cpu::onednn::impl_name(false, false, 256, 256, 128, 128, 256, 256, DType::bf16).rfind("ref", 0), 0u);
}

TEST(OnednnMatmul, OpsRouteBf16ToTheKernelAndReusePrimitives) {
  manual_seed(13);
  Tensor x = randn({2, 9, 24}).to(DType::bf16), w = randn({40, 24}).to(DType::bf16), bias = randn({40});
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  auto step = [&] {
    Tensor y = linear(x, w, bias.to(DType::bf16));
    EXPECT_EQ(y.dtype(), DType::bf16);
    sum(y).backward();
    return y;
  };
  const int64_t before = cpu::onednn::cache_stats().created;
  Tensor y = step();
  const int64_t after_first = cpu::onednn::cache_stats().created;
  EXPECT_GT(after_first, before);  // forward, dx and dw went through the primitive
  step();
  EXPECT_EQ(cpu::onednn::cache_stats().created, after_first);  // the second step creates none
  // The forward with its bias (beta = 1) against the reference.
  Tensor b2 = bias.to(DType::bf16).expand(Shape{18, 40}).contiguous();
  check_against_reference(y.detach().reshape(Shape{1, 18, 40}), b2.unsqueeze(0), x.detach().reshape(Shape{1, 18, 24}),
                          w.detach().t().unsqueeze(0), 1.0, 1.0);
}

// matmul_many (an MoE layer's experts): bf16 products whose rows change from call to call run on the primitive
// made for any m and k, within the same bound, and a call with new row counts creates no primitive.
TEST(OnednnMatmul, GroupedProductsOfAnyRowsShareOnePrimitive) {
  manual_seed(14);
  Kernels& kernels = device_kernels(Device::cpu());
  auto round_of = [&](const std::vector<int64_t>& rows) {
    // Per group: forward y (m, 48) = x (m, 40) @ W^T, and the weight gradient (48, 40) = dy^T (48 x m) @ x.
    std::vector<Tensor> keep;
    keep.reserve(8 * rows.size());
    std::vector<MatmulTask> tasks;
    for (int64_t m : rows) {
      keep.push_back(randn({m, 40}).to(DType::bf16));       // x
      keep.push_back(randn({48, 40}).to(DType::bf16).t());  // W^T (40, 48) view
      keep.push_back(zeros({m, 48}, DType::bf16));          // y
      tasks.push_back({&keep[keep.size() - 1], &keep[keep.size() - 3], &keep[keep.size() - 2]});
      keep.push_back(randn({m, 48}).to(DType::bf16).t());  // dy^T (48, m) view
      keep.push_back(zeros({48, 40}, DType::f32));         // dW, f32 out
      tasks.push_back({&keep[keep.size() - 1], &keep[keep.size() - 2], &keep[keep.size() - 5], 0.5, 0.0});
    }
    kernels.matmul_many(current_stream(Device::cpu()), tasks);
    for (const MatmulTask& t : tasks) {
      const Tensor c0 = zeros(t.out->shape(), t.out->dtype());
      check_against_reference(t.out->unsqueeze(0), c0.unsqueeze(0), t.a->unsqueeze(0), t.b->unsqueeze(0), t.alpha, 0.0);
    }
  };
  round_of({33, 7, 129, 1, 64});
  const int64_t created = cpu::onednn::cache_stats().created;
  round_of({35, 130, 2, 65, 8, 40});  // new rows: the same primitives
  EXPECT_EQ(cpu::onednn::cache_stats().created, created);
}

TEST(OnednnMatmul, NamesTheIsaAndAJitImplementation) {
  const std::string isa = cpu::onednn::isa_name();
  EXPECT_FALSE(isa.empty());
  EXPECT_EQ(isa.find("cpu_isa_"), std::string::npos);
  const std::string impl = cpu::onednn::impl_name(false, true, 256, 256, 256, 256, 256, 256, DType::bf16);
  EXPECT_NE(impl.rfind("ref", 0), 0u) << impl;  // a JIT kernel, not oneDNN's reference loops
}

}  // namespace
}  // namespace tidal
