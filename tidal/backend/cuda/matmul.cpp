// The matrix product on cuBLASLt (cublaslt.h): out[i] = alpha * a[i] @ b[i] + beta * out[i] over the
// broadcast batch dims. The trailing batch dims whose strides are uniform in a and b run as one
// strided-batched product; the leading rest loop on the host (the CPU backend's batch order).
#include <algorithm>
#include <vector>

#include "tidal/backend/cuda/attention_launch.h"
#include "tidal/backend/cuda/cublaslt.h"
#include "tidal/backend/cuda/elementwise_launch.h"
#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/backend/matmul_batch.h"
#include "tidal/tensor.h"

namespace tidal::cuda {
namespace {

// The first batch dim of the trailing run whose strides in a and b are those of its innermost dim of
// size > 1 (stride_a, stride_b) times the sizes after them: the run is one strided batch. Dims of size
// 1 join any run.
int uniform_from(const Shape& batch, const std::vector<int64_t>& sa, const std::vector<int64_t>& sb, int64_t& stride_a,
                 int64_t& stride_b) {
  int split = batch.size();
  int64_t span = 1;
  bool have = false;
  stride_a = stride_b = 0;
  for (int d = batch.size() - 1; d >= 0; --d) {
    const size_t i = size_t(d);
    if (batch[d] != 1) {
      if (!have) {
        stride_a = sa[i];
        stride_b = sb[i];
        have = true;
      } else if (sa[i] != stride_a * span || sb[i] != stride_b * span) {
        break;
      }
      span *= batch[d];
    }
    split = d;
  }
  return split;
}

// out = beta * out when k == 0 (nothing to multiply).
void scale_only(cudaStream_t s, const Tensor& out, double beta) {
  if (beta == 0)
    launch_fill(s, strided(out), out.numel(), 0.0);
  else if (beta != 1)
    launch_scale(s, strided(out), out.numel(), beta);
}

}  // namespace

int64_t CudaKernels::matmul_kept_workspace() const { return kGemmWorkspaceBytes; }

bool CudaKernels::matmul_operand_ok(int64_t rows, int64_t cols, int64_t stride_r, int64_t stride_c) const {
  bool trans = false;
  int64_t ld = 0;
  return gemm_layout(rows, cols, stride_r, stride_c, trans, ld);
}

// a (..., m, k), b (..., k, n), out (..., m, n) contiguous; batch dims of a and b broadcast to out's.
void CudaKernels::matmul(Stream& stream, const Tensor& out, const Tensor& a, const Tensor& b, double alpha,
                         double beta) {
  TIDAL_ASSERT(a.dtype() == b.dtype(), "matmul kernel got ", a.dtype(), " @ ", b.dtype());
  TIDAL_ASSERT(out.dtype() == a.dtype() || (a.dtype() == DType::bf16 && out.dtype() == DType::f32),
               "matmul kernel: ", a.dtype(), " operands cannot write ", out.dtype());
  TIDAL_ASSERT(out.is_contiguous(), "matmul kernel: out must be contiguous");
  const cudaStream_t s = stream_handle(stream);
  const int device = out.device().index;
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (out.numel() == 0) return;
  if (k == 0) return scale_only(s, out, beta);
  Shape batch;
  for (int d = 0; d < out.dim() - 2; ++d) batch.push_back(out.shape()[d]);
  const int64_t nbatch = batch.numel();
  GemmOperand ga{device_data(a)}, gb{device_data(b)};
  TIDAL_ASSERT(gemm_layout(m, k, a.stride(-2), a.stride(-1), ga.trans, ga.ld) &&
                   gemm_layout(k, n, b.stride(-2), b.stride(-1), gb.trans, gb.ld),
               "matmul operands need a unit stride");
  char* cp = static_cast<char*>(device_data(out));
  const int64_t ea = dtype_size(a.dtype()), ec = dtype_size(out.dtype());
  const std::vector<int64_t> sa = backend::batch_strides(a, batch), sb = backend::batch_strides(b, batch);
  const bool b_shared = std::all_of(sb.begin(), sb.end(), [](int64_t x) { return x == 0; });
  if (nbatch > 1 && b_shared && !ga.trans && backend::rows_fold(a, batch)) {
    gemm(device, s, a.dtype(), out.dtype(), nbatch * m, n, k, alpha, ga, gb, beta, cp, n, 0, 1);
    return;
  }
  const int split = uniform_from(batch, sa, sb, ga.batch_stride, gb.batch_stride);
  int64_t inner = 1;
  for (int d = split; d < batch.size(); ++d) inner *= batch[d];
  const char* a0 = static_cast<const char*>(ga.p);
  const char* b0 = static_cast<const char*>(gb.p);
  for (int64_t o = 0; o < nbatch / inner; ++o) {
    int64_t oa = 0, ob = 0, rem = o;
    for (int d = split - 1; d >= 0; --d) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      oa += idx * sa[size_t(d)];
      ob += idx * sb[size_t(d)];
    }
    GemmOperand ai = ga, bi = gb;
    ai.p = a0 + oa * ea;
    bi.p = b0 + ob * ea;
    gemm(device, s, a.dtype(), out.dtype(), m, n, k, alpha, ai, bi, beta, cp + o * inner * m * n * ec, n, m * n, inner);
  }
}

}  // namespace tidal::cuda

namespace tidal::cuda {

// out = a @ b + bias as one cuBLASLt product whose epilogue adds the bias, where that is one product:
// f32 or bf16 (cuBLASLt's bias has the output's type; no f64 bias epilogue), b a matrix shared by every
// row of a whose batch dims fold into its rows (linear's x (..., m, k) @ wᵀ), bias contiguous. Anything
// else, or a shape cuBLASLt has no bias algorithm for, takes the default: bias copied into out, then
// the product added (beta 1). The two agree to the rounding of one f32 addition order (the epilogue
// adds the bias to the f32 sum; beta 1 adds the output's bias the same way, but the heuristic may pick
// another algorithm); tests/cuda/matmul_test.cpp compares them.
void CudaKernels::matmul_bias(Stream& stream, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) {
  const DType t = out.dtype();
  TIDAL_ASSERT(a.dtype() == t && b.dtype() == t && bias.dtype() == t, "matmul_bias kernel: ", a.dtype(), " @ ",
               b.dtype(), " + ", bias.dtype(), " into ", t);
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  TIDAL_ASSERT(bias.dim() == 1 && bias.size(0) == n, "matmul_bias kernel: bias ", bias.shape(), " for ", n, " columns");
  bool fused = (t == DType::f32 || t == DType::bf16) && out.numel() > 0 && k > 0 && out.is_contiguous() &&
               b.dim() == 2 && (bias.stride(0) == 1 || n == 1);
  GemmOperand ga{device_data(a)}, gb{device_data(b)};
  int64_t rows = m;
  if (fused) {
    fused = gemm_layout(m, k, a.stride(-2), a.stride(-1), ga.trans, ga.ld) &&
            gemm_layout(k, n, b.stride(-2), b.stride(-1), gb.trans, gb.ld);
    Shape batch;
    for (int d = 0; d < out.dim() - 2; ++d) batch.push_back(out.shape()[d]);
    if (batch.numel() > 1) {  // a's batch dims must fold into its rows: one (B*m, k) matrix
      fused = fused && !ga.trans && backend::rows_fold(a, batch);
      rows = batch.numel() * m;
    }
  }
  if (fused && gemm_bias(out.device().index, stream_handle(stream), t, rows, n, k, ga, gb, device_data(bias),
                         device_data(out), n))
    return;
  Kernels::matmul_bias(stream, out, a, b, bias);
}

}  // namespace tidal::cuda
