// The CUDA loss kernels against the CPU backend: cross-entropy's forward (per-row loss and lse, the
// row-order sum) and backward (dlogits), and the chunked LM loss (its GEMMs go through the backend's
// matmul). f32 ~1e-5 relative, bf16 ~1e-2, f64 ~1e-12; ignored rows, odd sizes, strided rows.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tidal/ops/chunked_loss.h"
#include "tidal/ops/loss.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

const Device kCuda = Device::cuda(0);

Tensor to_cuda(const Tensor& t) { return from_vector(t.contiguous().to_vector<double>(), t.shape(), t.dtype(), kCuda); }

Tensor normal(const Shape& shape, DType dt, double scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (double& x : v) x = d(rng);
  return from_vector(v, shape, dt);
}
// Targets in [0, vocab) with every fifth row ignored (-100).
Tensor targets_for(int64_t rows, int64_t vocab, DType dt, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<double> v(static_cast<size_t>(rows));
  for (size_t r = 0; r < v.size(); ++r) v[r] = r % 5 == 4 ? -100.0 : double(rng() % uint64_t(vocab));
  return from_vector(v, {rows}, dt);
}

double tol(DType dt) { return dt == DType::f64 ? 1e-12 : dt == DType::bf16 ? 1e-2 : 1e-5; }

void expect_close(const Tensor& cpu, const Tensor& cuda, double rel, double abs, const char* what) {
  const std::vector<double> a = cpu.contiguous().to_vector<double>(), b = cuda.to_vector<double>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], abs + rel * std::abs(a[i])) << what << " at " << i;
}

TEST(CudaLoss, CrossEntropyOpMatchesCpu) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    for (int64_t rows : {1, 7, 1000}) {
      for (int64_t vocab : {1, 50, 4097}) {
        Tensor wide = normal({rows, vocab + 3}, dt, 3.0, uint32_t(rows + vocab));
        Tensor t = targets_for(rows, vocab, rows % 2 ? DType::i64 : DType::i32, 2);
        Tensor x = wide.narrow(1, 0, vocab), xc = to_cuda(wide).narrow(1, 0, vocab);  // strided rows
        for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
          Tensor a = cross_entropy(x, t, -100, red), b = cross_entropy(xc, to_cuda(t), -100, red);
          expect_close(a, b, tol(dt), 10 * tol(dt), "loss");  // abs: ulps of an lse ~10
        }
      }
    }
  }
  Tensor bad = from_vector({0, 3, 9, -100}, {4}, DType::i64);
  EXPECT_THROW(cross_entropy(to_cuda(normal({4, 5}, DType::f32, 1.0, 3)), to_cuda(bad)), std::exception);
}

TEST(CudaLoss, CrossEntropyKernelsMatchCpu) {
  TIDAL_REQUIRE_CUDA();
  Kernels& cpu = device_kernels(Device::cpu());
  Kernels& cuda = device_kernels(kCuda);
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    const DType acc = dt == DType::f64 ? DType::f64 : DType::f32;
    for (int64_t rows : {1, 7, 1000}) {
      const int64_t vocab = 4097;
      Tensor x = normal({rows, vocab}, dt, 2.0, 4), t = targets_for(rows, vocab, DType::i64, 5);
      Tensor xc = to_cuda(x), tc = to_cuda(t);
      CrossEntropyArgs a;
      a.rows = rows;
      a.vocab = vocab;
      a.row_stride = vocab;
      Tensor loss = empty({rows}, acc), lse = empty({rows}, acc);
      Tensor lossc = empty({rows}, acc, kCuda), lsec = empty({rows}, acc, kCuda);
      const CrossEntropySums s = cpu.cross_entropy_forward(current_stream(Device::cpu()), loss, lse, x, t, a);
      const CrossEntropySums sc = cuda.cross_entropy_forward(current_stream(kCuda), lossc, lsec, xc, tc, a);
      EXPECT_EQ(s.count, sc.count);
      EXPECT_NEAR(s.loss, sc.loss, 1e-5 * std::abs(s.loss) + 1e-9);
      expect_close(lse, lsec, tol(acc), 0, "lse");
      expect_close(loss, lossc, tol(acc), 1e-5, "row loss");
      Tensor rg = normal({rows}, dt, 1.0, 6);
      for (bool per_row : {false, true}) {
        Tensor d = empty({rows, vocab}, dt), dc = empty({rows, vocab}, dt, kCuda);
        cpu.cross_entropy_backward(current_stream(Device::cpu()), d, x, lse, t, per_row ? rg : Tensor(), 0.5, a);
        cuda.cross_entropy_backward(current_stream(kCuda), dc, xc, lsec, tc, per_row ? to_cuda(rg) : Tensor(), 0.5, a);
        expect_close(d, dc, tol(dt), tol(dt) * 1e-3, "dlogits");
      }
    }
  }
}

// The chunked loss's kernel directly: loss sum, row losses and both gradients, chunks that do and do
// not divide the rows. Needs the CUDA matmul.
TEST(CudaLoss, ChunkedLmLossMatchesCpu) {
  TIDAL_REQUIRE_CUDA();
  Kernels& cpu = device_kernels(Device::cpu());
  Kernels& cuda = device_kernels(kCuda);
  for (DType dt : {DType::f32, DType::f64}) {
    for (int64_t chunk : {1, 7, 64, 1000}) {
      const int64_t N = 130, C = 48, V = 1001;
      Tensor h = normal({N, C}, dt, 1.0, 7), w = normal({V, C}, dt, 0.2, 8), t = targets_for(N, V, DType::i64, 9);
      ChunkedLossArgs a;
      a.rows = N;
      a.hidden = C;
      a.vocab = V;
      a.chunk = chunk;
      a.grad_scale = 1.0 / double(cpu.count_not_ignored(current_stream(Device::cpu()), t, -100));
      EXPECT_EQ(cuda.count_not_ignored(current_stream(kCuda), to_cuda(t), -100), N - N / 5);
      const int64_t lr = std::min(chunk, N);
      Tensor logits = empty({lr, V}, dt), loss = empty({N}, dt), gh = empty({N, C}, dt), gw = empty({V, C}, dt);
      Tensor logitsc = empty({lr, V}, dt, kCuda), lossc = empty({N}, dt, kCuda), ghc = empty({N, C}, dt, kCuda),
             gwc = empty({V, C}, dt, kCuda);
      const double s = cpu.chunked_lm_loss_forward(current_stream(Device::cpu()), h, w, t, logits, loss, gh, gw, a);
      const double sc = cuda.chunked_lm_loss_forward(current_stream(kCuda), to_cuda(h), to_cuda(w), to_cuda(t), logitsc,
                                                     lossc, ghc, gwc, a);
      EXPECT_NEAR(s, sc, 10 * tol(dt) * std::abs(s));
      expect_close(loss, lossc, 10 * tol(dt), 0, "row loss");
      expect_close(gh, ghc, 1e-4, 1e-7, "grad_hidden");  // TF32 off? see the matmul's own tolerance
      expect_close(gw, gwc, 1e-4, 1e-7, "grad_weight");
    }
  }
  // The op: forward value against the CPU's.
  Tensor h = normal({2, 65, 32}, DType::f32, 1.0, 10), w = normal({300, 32}, DType::f32, 0.3, 11);
  Tensor t = targets_for(130, 300, DType::i64, 12).reshape({2, 65});
  Tensor a = chunked_lm_loss(h, w, t, 16), b = chunked_lm_loss(to_cuda(h), to_cuda(w), to_cuda(t), 16);
  expect_close(a, b, 1e-4, 0, "chunked_lm_loss");
}

}  // namespace
}  // namespace tidal
