// The CPU backend behind the kernel seam: each entry forwards to the family's kernel in this folder.
#include "tidal/backend/cpu/kernels.h"

#include <cstring>

#include "tidal/backend/cpu/activation.h"
#include "tidal/backend/cpu/attention_eager.h"
#include "tidal/backend/cpu/attention_flash.h"
#include "tidal/backend/cpu/blas.h"
#include "tidal/backend/cpu/chunked_loss.h"
#include "tidal/backend/cpu/elementwise.h"
#include "tidal/backend/cpu/embedding.h"
#include "tidal/backend/cpu/index.h"
#include "tidal/backend/cpu/loss.h"
#include "tidal/backend/cpu/matmul.h"
#include "tidal/backend/cpu/norm.h"
#include "tidal/backend/cpu/onednn_matmul.h"
#include "tidal/backend/cpu/optim.h"
#include "tidal/backend/cpu/random.h"
#include "tidal/backend/cpu/reduce.h"
#include "tidal/backend/cpu/rope.h"
#include "tidal/backend/cpu/softmax.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

class CpuKernels final : public Kernels {
 public:
  const char* name() const override { return "cpu"; }
  std::string describe() const override {
    return std::string("  gemm           ") + blas::backend_name() +
           " (f32); oneDNN matmul (bf16, f32 accumulation, isa " + onednn::isa_name() + "); reference kernel (f64)\n";
  }

  bool matmul_operand_ok(int64_t rows, int64_t cols, int64_t stride_r, int64_t stride_c) const override {
    return blas_compatible(rows, cols, stride_r, stride_c);
  }
  int64_t norm_row_chunks(int64_t rows) const override { return cpu::norm_row_chunks(rows); }
  int64_t flash_forward_workspace(const Tensor& q, const Tensor& k, const Tensor& v) const override {
    return cpu::flash_forward_workspace(q, k, v);
  }
  int64_t flash_backward_workspace(const Tensor& dq, const Tensor& q, const Tensor& k, const Tensor& v) const override {
    return cpu::flash_backward_workspace(dq, q, k, v);
  }

  void copy_from_host(Stream&, const Tensor& dst, const void* src) override {
    if (dst.nbytes() > 0) std::memcpy(dst.raw_data(), src, size_t(dst.nbytes()));
  }
  void copy_to_host(Stream&, void* dst, const Tensor& src) override {
    if (src.nbytes() > 0) std::memcpy(dst, src.raw_data(), size_t(src.nbytes()));
  }

  void unary(Stream&, Unary op, const Tensor& out, const Tensor& in, double s) override { cpu::unary(op, out, in, s); }
  void binary(Stream&, Binary op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) override {
    cpu::binary(op, out, a, b, alpha);
  }
  void compare(Stream&, Compare op, const Tensor& out, const Tensor& a, const Tensor& b) override {
    cpu::compare(op, out, a, b);
  }
  void compare_scalar(Stream&, Compare op, const Tensor& out, const Tensor& a, double s) override {
    cpu::compare_scalar(op, out, a, s);
  }
  void where(Stream&, const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override {
    cpu::where(out, cond, a, b);
  }
  void masked_fill(Stream&, const Tensor& out, const Tensor& x, const Tensor& mask, double value) override {
    cpu::masked_fill(out, x, mask, value);
  }
  void copy(Stream&, const Tensor& dst, const Tensor& src) override { cpu::copy(dst, src); }
  void fill(Stream&, const Tensor& dst, double value) override { cpu::fill(dst, value); }
  void add_inplace(Stream&, const Tensor& dst, const Tensor& src, double alpha) override {
    cpu::add_inplace(dst, src, alpha);
  }

  void random_fill(Stream&, const Tensor& out, Distribution dist, uint64_t seed, uint64_t start) override {
    cpu::random_fill(out, dist, seed, start);
  }
  void randint_fill(Stream&, const Tensor& out, int64_t low, int64_t high, uint64_t seed, uint64_t start) override {
    cpu::randint_fill(out, low, high, seed, start);
  }
  void dropout_forward(Stream&, const Tensor& out, const Tensor& mask, const Tensor& x, double p, double scale,
                       uint64_t seed, uint64_t start) override {
    cpu::dropout_forward(out, mask, x, p, scale, seed, start);
  }
  void dropout_backward(Stream&, const Tensor& dx, const Tensor& g, const Tensor& mask, double scale) override {
    cpu::dropout_backward(dx, g, mask, scale);
  }
  void dropout_rows_forward(Stream&, const DropoutRowsArgs& a, const Tensor& out, const Tensor& mask, const Tensor& x,
                            double p, double scale) override {
    cpu::dropout_rows_forward(a, out, mask, x, p, scale);
  }

  void gelu_forward(Stream&, const Tensor& out, const Tensor& x, bool tanh_approx) override {
    cpu::gelu_forward(out, x, tanh_approx);
  }
  void gelu_backward(Stream&, const Tensor& dx, const Tensor& g, const Tensor& x, bool tanh_approx) override {
    cpu::gelu_backward(dx, g, x, tanh_approx);
  }
  void silu_forward(Stream&, const Tensor& out, const Tensor& x) override { cpu::silu_forward(out, x); }
  void silu_backward(Stream&, const Tensor& dx, const Tensor& g, const Tensor& x) override {
    cpu::silu_backward(dx, g, x);
  }
  void swiglu_forward(Stream&, const Tensor& out, const Tensor& gate, const Tensor& up) override {
    cpu::swiglu_forward(out, gate, up);
  }
  void swiglu_backward(Stream&, const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate,
                       const Tensor& up) override {
    cpu::swiglu_backward(dgate, dup, g, gate, up);
  }

  void sum(Stream&, const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner,
           double scale) override {
    sum_kernel(out, x, outer, n, inner, scale);
  }
  void max(Stream&, const Tensor& values, const Tensor& indices, const Tensor& x, int64_t outer, int64_t n,
           int64_t inner) override {
    max_kernel(values, indices, x, outer, n, inner);
  }
  void max_backward(Stream&, const Tensor& grad_in, const Tensor& g, const Tensor& indices, int64_t outer, int64_t n,
                    int64_t inner) override {
    max_backward_kernel(grad_in, g, indices, outer, n, inner);
  }
  void sum_of_squares(Stream&, const Tensor& x, int64_t chunk, double* partials) override {
    cpu::sum_of_squares(x, chunk, partials);
  }

  void matmul(Stream&, const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) override {
    matmul_kernel(out, a, b, alpha, beta);
  }

  void softmax_forward(Stream&, const Tensor& out, const Tensor& x, const SoftmaxArgs& a) override {
    cpu::softmax_forward(out, x, a);
  }
  void softmax_backward(Stream&, const Tensor& dx, const Tensor& g, const Tensor& y, const SoftmaxArgs& a) override {
    cpu::softmax_backward(dx, g, y, a);
  }
  void layer_norm_forward(Stream&, const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                          const Tensor& weight, const Tensor& bias, const NormArgs& a) override {
    cpu::layer_norm_forward(out, mean, rstd, x, weight, bias, a);
  }
  void layer_norm_backward(Stream&, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                           const Tensor& workspace, const Tensor& g, const Tensor& x, const Tensor& mean,
                           const Tensor& rstd, const Tensor& weight, const NormArgs& a) override {
    cpu::layer_norm_backward(dx, dweight, dbias, workspace, g, x, mean, rstd, weight, a);
  }
  void rms_norm_forward(Stream&, const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                        const NormArgs& a) override {
    cpu::rms_norm_forward(out, rstd, x, weight, a);
  }
  void rms_norm_backward(Stream&, const Tensor& dx, const Tensor& dweight, const Tensor& workspace, const Tensor& g,
                         const Tensor& x, const Tensor& rstd, const Tensor& weight, const NormArgs& a) override {
    cpu::rms_norm_backward(dx, dweight, workspace, g, x, rstd, weight, a);
  }
  void rope_tables(Stream&, const Tensor& cos, const Tensor& sin, double theta, int64_t position_offset) override {
    rope_tables_kernel(cos, sin, theta, position_offset);
  }
  void rope(Stream&, const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
            bool transpose) override {
    rope_kernel(out, x, cos, sin, transpose);
  }
  void embedding_forward(Stream&, const Tensor& out, const Tensor& weight, const Tensor& ids) override {
    cpu::embedding_forward(out, weight, ids);
  }
  void embedding_backward(Stream&, const Tensor& grad_weight, const Tensor& g, const Tensor& ids) override {
    cpu::embedding_backward(grad_weight, g, ids);
  }

  void scaled_masked_softmax_forward(Stream&, const Tensor& probs, const Tensor& scores, double scale,
                                     bool causal) override {
    cpu::scaled_masked_softmax_forward(probs, scores, scale, causal);
  }
  void scaled_masked_softmax_backward(Stream&, const Tensor& grad_scores, const Tensor& grad_probs, const Tensor& probs,
                                      double scale) override {
    cpu::scaled_masked_softmax_backward(grad_scores, grad_probs, probs, scale);
  }
  void flash_attention_forward(Stream&, const FlashArgs& a, const Tensor& out, const Tensor& lse, const Tensor& q,
                               const Tensor& k, const Tensor& v, const Tensor& workspace) override {
    cpu::flash_attention_forward(a, out, lse, q, k, v, workspace);
  }
  void flash_attention_backward(Stream&, const FlashArgs& a, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse, const Tensor& workspace) override {
    cpu::flash_attention_backward(a, dq, dk, dv, dout, q, k, v, out, lse, workspace);
  }

  int64_t find_bad_target(Stream&, const Tensor& targets, const CrossEntropyArgs& a) override {
    return cpu::find_bad_target(targets, a);
  }
  CrossEntropySums cross_entropy_forward(Stream&, const Tensor& loss, const Tensor& lse, const Tensor& logits,
                                         const Tensor& targets, const CrossEntropyArgs& a) override {
    return cpu::cross_entropy_forward(loss, lse, logits, targets, a);
  }
  void cross_entropy_backward(Stream&, const Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                              const Tensor& targets, const Tensor& row_grad, double scale,
                              const CrossEntropyArgs& a) override {
    cpu::cross_entropy_backward(dlogits, logits, lse, targets, row_grad, scale, a);
  }
  int64_t count_not_ignored(Stream&, const Tensor& targets, int64_t ignore_index) override {
    return cpu::count_not_ignored(targets, ignore_index);
  }
  double chunked_lm_loss_forward(Stream&, const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                                 const Tensor& logits, const Tensor& row_loss, const Tensor& grad_hidden,
                                 const Tensor& grad_weight, const ChunkedLossArgs& a) override {
    return cpu::chunked_lm_loss_forward(hidden, weight, targets, logits, row_loss, grad_hidden, grad_weight, a);
  }

  void gather(Stream&, const Tensor& out, const Tensor& x, const Tensor& index, int dim) override {
    gather_kernel(out, x, index, dim);
  }
  void scatter_add(Stream&, const Tensor& out, const Tensor& src, const Tensor& index, int dim) override {
    scatter_add_kernel(out, src, index, dim);
  }
  int64_t first_out_of_range(Stream&, const Tensor& index, int64_t limit) override {
    return cpu::first_out_of_range(index, limit);
  }
  int64_t index_max(Stream&, const Tensor& index, int64_t* min_out) override { return cpu::index_max(index, min_out); }
  void topk(Stream&, const Tensor& values, const Tensor& indices, const Tensor& x, int dim, int64_t k, bool largest,
            bool sorted) override {
    topk_kernel(values, indices, x, dim, k, largest, sorted);
  }
  void argsort(Stream&, const Tensor& indices, const Tensor& x, int dim, bool descending) override {
    argsort_kernel(indices, x, dim, descending);
  }
  void bincount(Stream&, const Tensor& counts, const Tensor& index) override { bincount_kernel(counts, index); }

  void adamw_step(Stream&, const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const Tensor& master, const AdamWArgs& a) override {
    cpu::adamw_step(param, grad, exp_avg, exp_avg_sq, master, a);
  }
};

}  // namespace

Kernels& kernels() {
  static CpuKernels k;
  return k;
}

}  // namespace tidal::cpu
