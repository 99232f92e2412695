#pragma once
// The CUDA backend's kernels (seam/kernels.h; docs/cuda.md has the table): each family's methods are
// declared in its section below and defined in its .cpp, which checks the tensors and calls the
// launchers its .cu defines (plain arguments: pointers, sizes, strides, the cudaStream_t); a kernel not
// declared here would throw "no cuda kernel for <name>" (tests/unit/seam/missing_kernels_test.cpp lists
// what a backend lacks: none here). Every kernel queues on the stream it is given (stream.h stream_handle); one that
// returns a value to the host synchronizes that stream first. Deterministic: no floating-point atomics whose order
// changes a result, so a recompute or an N-rank run gives the same bits as the plain run.
#include <string>

#include "tidal/seam/kernels.h"

namespace tidal::cuda {

class CudaKernels final : public Kernels {
 public:
  const char* name() const override { return "cuda"; }
  std::string describe() const override;  // kernels.cpp

  // --- host transfers: kernels.cpp
  void copy_from_host(Stream& stream, const Tensor& dst, const void* src) override;
  void copy_to_host(Stream& stream, void* dst, const Tensor& src) override;

  // --- elementwise, random, activations: elementwise.cpp, random.cpp, activation.cpp
  void unary(Stream& stream, Unary op, const Tensor& out, const Tensor& in, double s) override;
  void binary(Stream& stream, Binary op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) override;
  void compare(Stream& stream, Compare op, const Tensor& out, const Tensor& a, const Tensor& b) override;
  void compare_scalar(Stream& stream, Compare op, const Tensor& out, const Tensor& a, double s) override;
  void where(Stream& stream, const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override;
  void masked_fill(Stream& stream, const Tensor& out, const Tensor& x, const Tensor& mask, double value) override;
  void copy(Stream& stream, const Tensor& dst, const Tensor& src) override;
  void fill(Stream& stream, const Tensor& dst, double value) override;
  void add_inplace(Stream& stream, const Tensor& dst, const Tensor& src, double alpha) override;
  void random_fill(Stream& stream, const Tensor& out, Distribution dist, uint64_t seed, uint64_t start) override;
  void randint_fill(Stream& stream, const Tensor& out, int64_t low, int64_t high, uint64_t seed,
                    uint64_t start) override;
  void dropout_forward(Stream& stream, const Tensor& out, const Tensor& mask, const Tensor& x, double p, double scale,
                       uint64_t seed, uint64_t start) override;
  void dropout_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& mask, double scale) override;
  void dropout_rows_forward(Stream& stream, const DropoutRowsArgs& a, const Tensor& out, const Tensor& mask,
                            const Tensor& x, double p, double scale) override;
  void gelu_forward(Stream& stream, const Tensor& out, const Tensor& x, bool tanh_approx) override;
  void gelu_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& x, bool tanh_approx) override;
  void silu_forward(Stream& stream, const Tensor& out, const Tensor& x) override;
  void silu_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& x) override;
  void glu_forward(Stream& stream, const Tensor& out, const Tensor& gate, const Tensor& up, GluActivation act) override;
  void glu_backward(Stream& stream, const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate,
                    const Tensor& up, GluActivation act) override;

  // --- reductions, softmax, norms, RoPE, embedding, losses: reduce.cpp, softmax.cpp, norm.cpp, rope.cpp,
  // embedding.cpp, loss.cpp, chunked_loss.cpp
  int64_t norm_row_chunks(int64_t rows) const override;
  void sum(Stream& stream, const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner,
           double scale) override;
  void max(Stream& stream, const Tensor& values, const Tensor& indices, const Tensor& x, int64_t outer, int64_t n,
           int64_t inner) override;
  void max_backward(Stream& stream, const Tensor& grad_in, const Tensor& g, const Tensor& indices, int64_t outer,
                    int64_t n, int64_t inner) override;
  void softmax_forward(Stream& stream, const Tensor& out, const Tensor& x, const SoftmaxArgs& a) override;
  void softmax_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& y,
                        const SoftmaxArgs& a) override;
  void scaled_masked_softmax_forward(Stream& stream, const Tensor& probs, const Tensor& scores,
                                     const MaskedSoftmaxArgs& a) override;
  void scaled_masked_softmax_backward(Stream& stream, const Tensor& grad_scores, const Tensor& grad_probs,
                                      const Tensor& probs, double scale) override;
  void layer_norm_forward(Stream& stream, const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                          const Tensor& weight, const Tensor& bias, const NormArgs& a) override;
  void layer_norm_backward(Stream& stream, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                           const Tensor& workspace, const Tensor& g, const Tensor& x, const Tensor& mean,
                           const Tensor& rstd, const Tensor& weight, const NormArgs& a) override;
  void rms_norm_forward(Stream& stream, const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                        const NormArgs& a) override;
  void rms_norm_backward(Stream& stream, const Tensor& dx, const Tensor& dweight, const Tensor& workspace,
                         const Tensor& g, const Tensor& x, const Tensor& rstd, const Tensor& weight,
                         const NormArgs& a) override;
  void rope_tables(Stream& stream, const Tensor& cos, const Tensor& sin, const RopeTableArgs& a) override;
  void rope(Stream& stream, const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
            bool transpose) override;
  void embedding_forward(Stream& stream, const Tensor& out, const Tensor& weight, const Tensor& ids) override;
  void embedding_backward(Stream& stream, const Tensor& grad_weight, const Tensor& g, const Tensor& ids) override;
  // DeepSeek-V4's Sinkhorn-Knopp projection (sinkhorn.cpp)
  void sinkhorn_forward(Stream& stream, const Tensor& out, const Tensor& x, const SinkhornArgs& a) override;
  void sinkhorn_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& x,
                         const SinkhornArgs& a) override;

  // --- matrix products (cuBLASLt) and attention (cuDNN SDPA, eager fallback): matmul.cpp, attention.cpp,
  // sparse_attention.cpp
  bool matmul_operand_ok(int64_t rows, int64_t cols, int64_t stride_r, int64_t stride_c) const override;
  int64_t matmul_kept_workspace() const override;  // cuBLASLt's workspace (matmul.cpp)
  void matmul(Stream& stream, const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) override;
  int64_t flash_forward_workspace(const FlashArgs& cfg, const Tensor& q, const Tensor& k,
                                  const Tensor& v) const override;
  int64_t flash_backward_workspace(const FlashArgs& cfg, const Tensor& dq, const Tensor& q, const Tensor& k,
                                   const Tensor& v) const override;
  void flash_attention_forward(Stream& stream, const FlashArgs& a, const Tensor& out, const Tensor& lse,
                               const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& workspace) override;
  void flash_attention_backward(Stream& stream, const FlashArgs& a, const Tensor& dq, const Tensor& dk,
                                const Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse, const Tensor& workspace) override;
  // attention over per-query kept keys (sparse_attention.cpp)
  int64_t sparse_attention_backward_workspace(const Tensor& q, const Tensor& kept) const override;
  void sparse_attention_forward(Stream& stream, double scale, const Tensor& out, const Tensor& lse, const Tensor& q,
                                const Tensor& keys, const Tensor& values, const Tensor& kept) override;
  void sparse_attention_backward(Stream& stream, double scale, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                 const Tensor& dout, const Tensor& dlse, const Tensor& q, const Tensor& keys,
                                 const Tensor& values, const Tensor& kept, const Tensor& out, const Tensor& lse,
                                 const Tensor& workspace) override;

  // --- indexing and MoE routing, the optimizer: index.cpp, optim.cpp
  // losses (loss.cpp, chunked_loss.cpp)
  int64_t find_bad_target(Stream& stream, const Tensor& targets, const CrossEntropyArgs& a) override;
  CrossEntropySums cross_entropy_forward(Stream& stream, const Tensor& loss, const Tensor& lse, const Tensor& logits,
                                         const Tensor& targets, const CrossEntropyArgs& a) override;
  void cross_entropy_backward(Stream& stream, const Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                              const Tensor& targets, const Tensor& row_grad, double scale,
                              const CrossEntropyArgs& a) override;
  int64_t count_not_ignored(Stream& stream, const Tensor& targets, int64_t ignore_index) override;
  double chunked_lm_loss_forward(Stream& stream, const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                                 const Tensor& logits, const Tensor& row_loss, const Tensor& grad_hidden,
                                 const Tensor& grad_weight, const ChunkedLossArgs& a) override;
  // indexing and MoE routing (index.cpp)
  void gather(Stream& stream, const Tensor& out, const Tensor& x, const Tensor& index, int dim) override;
  void scatter_add(Stream& stream, const Tensor& out, const Tensor& src, const Tensor& index, int dim) override;
  int64_t first_out_of_range(Stream& stream, const Tensor& index, int64_t limit) override;
  int64_t index_max(Stream& stream, const Tensor& index, int64_t* min_out) override;
  void topk(Stream& stream, const Tensor& values, const Tensor& indices, const Tensor& x, int dim, int64_t k,
            bool largest, bool sorted) override;
  void argsort(Stream& stream, const Tensor& indices, const Tensor& x, int dim, bool descending) override;
  void bincount(Stream& stream, const Tensor& counts, const Tensor& index) override;
  // the optimizer (optim.cpp)
  void sum_of_squares(Stream& stream, const Tensor& x, int64_t chunk, double* partials) override;
  void adamw_step(Stream& stream, const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const Tensor& master, const AdamWArgs& a) override;
  // composite kernels, fused: matmul_bias as one cuBLASLt product with its bias epilogue (matmul.cpp),
  // adamw_multi_step as the multi-tensor AdamW (optim.cpp),
  void matmul_bias(Stream& stream, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) override;
  void adamw_multi_step(Stream& stream, std::span<const AdamWTensors> tensors) override;
  // add_rows_inplace: every row in one launch (64 a launch), each element through the rows in order (optim.cpp)
  void add_rows_inplace(Stream& stream, const Tensor& dst, std::span<const Tensor* const> rows) override;
  // sum_of_squares_many: every tensor's partial sums into one device buffer, one read-back (optim.cpp)
  void sum_of_squares_many(Stream& stream, std::span<const Tensor* const> xs, int64_t chunk,
                           std::span<double* const> partials) override;
};

}  // namespace tidal::cuda
