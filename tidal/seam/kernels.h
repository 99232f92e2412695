#pragma once
// The seam between device-neutral ops and a device's kernels. Note [Backend seam] in
// docs/architecture.md: ops/ allocates outputs (so every byte is accounted on every device, meta
// included), checks shapes, records autograd, then asks kernels_for(output) for the kernels to run.
// A backend (backend/<device>/) implements Kernels and registers it in backend/registry.cpp; nothing
// in ops/, autograd/, memory/ or models/ names a device.
//
// Every kernel takes the stream it runs on first: the current stream of its output's device
// (stream.h current_stream; PyTorch's current stream, MLX's StreamOrDevice). A device with queues
// launches there; the CPU backend runs every kernel on the calling thread, the compute stream's
// semantics. A kernel that returns a value has finished when it returns.
//
// Kernels write into preallocated outputs and read inputs with any strides unless a comment says
// "contiguous". Floating kernels accumulate in f32 for bf16 (f64 for f64).
#include <cstdint>
#include <string>

#include "tidal/device.h"
#include "tidal/seam/kernel_args.h"

namespace tidal {

class Stream;
class Tensor;

class Kernels {
 public:
  virtual ~Kernels() = default;
  virtual const char* name() const = 0;
  // What the kernels run on, as `tidal info` prints it: "  gemm           oneDNN (f32); ...\n" lines.
  virtual std::string describe() const = 0;

  // --- layout rules: pure functions of shapes, valid for meta tensors too (they size workspaces
  // and decide operand copies, which the accounting sees)
  virtual bool matmul_operand_ok(int64_t rows, int64_t cols, int64_t stride_r, int64_t stride_c) const = 0;
  virtual int64_t norm_row_chunks(int64_t rows) const = 0;  // partial-sum rows of the norm weight grads
  virtual int64_t flash_forward_workspace(const Tensor& q, const Tensor& k, const Tensor& v) const = 0;
  virtual int64_t flash_backward_workspace(const Tensor& dq, const Tensor& q, const Tensor& k,
                                           const Tensor& v) const = 0;

  // --- host transfers (contiguous device tensors; bytes in the tensor's dtype)
  virtual void copy_from_host(Stream& stream, const Tensor& dst, const void* src) = 0;
  virtual void copy_to_host(Stream& stream, void* dst, const Tensor& src) = 0;

  // --- elementwise (inputs broadcast to the output's shape)
  virtual void unary(Stream& stream, Unary op, const Tensor& out, const Tensor& in, double s) = 0;
  virtual void binary(Stream& stream, Binary op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) = 0;
  virtual void compare(Stream& stream, Compare op, const Tensor& out, const Tensor& a, const Tensor& b) = 0;  // out u8
  virtual void compare_scalar(Stream& stream, Compare op, const Tensor& out, const Tensor& a, double s) = 0;
  virtual void where(Stream& stream, const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) = 0;
  virtual void masked_fill(Stream& stream, const Tensor& out, const Tensor& x, const Tensor& mask, double value) = 0;
  virtual void copy(Stream& stream, const Tensor& dst, const Tensor& src) = 0;  // converts dtype
  virtual void fill(Stream& stream, const Tensor& dst, double value) = 0;
  virtual void add_inplace(Stream& stream, const Tensor& dst, const Tensor& src, double alpha) = 0;

  // --- random (contiguous outputs; Philox key `seed`, element i at stream position start + i)
  virtual void random_fill(Stream& stream, const Tensor& out, Distribution dist, uint64_t seed, uint64_t start) = 0;
  virtual void randint_fill(Stream& stream, const Tensor& out, int64_t low, int64_t high, uint64_t seed,
                            uint64_t start) = 0;
  // out = keep ? x * scale : 0 with keep = uniform >= p; mask (u8) = keep. x contiguous.
  virtual void dropout_forward(Stream& stream, const Tensor& out, const Tensor& mask, const Tensor& x, double p,
                               double scale, uint64_t seed, uint64_t start) = 0;
  virtual void dropout_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& mask,
                                double scale) = 0;
  // dropout_forward with the stream positions of DropoutRowsArgs (a piece of a larger tensor). x contiguous.
  virtual void dropout_rows_forward(Stream& stream, const DropoutRowsArgs& a, const Tensor& out, const Tensor& mask,
                                    const Tensor& x, double p, double scale) = 0;

  // --- activations
  virtual void gelu_forward(Stream& stream, const Tensor& out, const Tensor& x, bool tanh_approx) = 0;
  virtual void gelu_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& x, bool tanh_approx) = 0;
  virtual void silu_forward(Stream& stream, const Tensor& out, const Tensor& x) = 0;
  virtual void silu_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& x) = 0;
  virtual void swiglu_forward(Stream& stream, const Tensor& out, const Tensor& gate, const Tensor& up) = 0;
  virtual void swiglu_backward(Stream& stream, const Tensor& dgate, const Tensor& dup, const Tensor& g,
                               const Tensor& gate, const Tensor& up) = 0;

  // --- reductions over dim of a contiguous (outer, n, inner) view
  virtual void sum(Stream& stream, const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner,
                   double scale) = 0;
  virtual void max(Stream& stream, const Tensor& values, const Tensor& indices, const Tensor& x, int64_t outer,
                   int64_t n, int64_t inner) = 0;
  virtual void max_backward(Stream& stream, const Tensor& grad_in, const Tensor& g, const Tensor& indices,
                            int64_t outer, int64_t n, int64_t inner) = 0;
  // partials[c] = Σ x² over elements [c·chunk, (c+1)·chunk) of contiguous x, in f64: ⌈numel/chunk⌉
  // values, each independent of the thread count (the gradient norm's deterministic partial sums).
  virtual void sum_of_squares(Stream& stream, const Tensor& x, int64_t chunk, double* partials) = 0;

  // --- matrix product: out = alpha * a @ b + beta * out (batch dims broadcast). a and b share a dtype;
  // out has it too, except that bf16 operands may write an f32 out (f32 accumulation either way).
  virtual void matmul(Stream& stream, const Tensor& out, const Tensor& a, const Tensor& b, double alpha,
                      double beta) = 0;

  // --- softmax, norms, RoPE, embedding
  virtual void softmax_forward(Stream& stream, const Tensor& out, const Tensor& x, const SoftmaxArgs& a) = 0;
  virtual void softmax_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& y,
                                const SoftmaxArgs& a) = 0;
  virtual void layer_norm_forward(Stream& stream, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                  const Tensor& x, const Tensor& weight, const Tensor& bias, const NormArgs& a) = 0;
  virtual void layer_norm_backward(Stream& stream, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                   const Tensor& workspace, const Tensor& g, const Tensor& x, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& weight, const NormArgs& a) = 0;
  virtual void rms_norm_forward(Stream& stream, const Tensor& out, const Tensor& rstd, const Tensor& x,
                                const Tensor& weight, const NormArgs& a) = 0;
  virtual void rms_norm_backward(Stream& stream, const Tensor& dx, const Tensor& dweight, const Tensor& workspace,
                                 const Tensor& g, const Tensor& x, const Tensor& rstd, const Tensor& weight,
                                 const NormArgs& a) = 0;
  virtual void rope_tables(Stream& stream, const Tensor& cos, const Tensor& sin, double theta,
                           int64_t position_offset) = 0;
  virtual void rope(Stream& stream, const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
                    bool transpose) = 0;
  virtual void embedding_forward(Stream& stream, const Tensor& out, const Tensor& weight, const Tensor& ids) = 0;
  virtual void embedding_backward(Stream& stream, const Tensor& grad_weight, const Tensor& g, const Tensor& ids) = 0;

  // --- attention
  virtual void scaled_masked_softmax_forward(Stream& stream, const Tensor& probs, const Tensor& scores, double scale,
                                             bool causal) = 0;
  virtual void scaled_masked_softmax_backward(Stream& stream, const Tensor& grad_scores, const Tensor& grad_probs,
                                              const Tensor& probs, double scale) = 0;
  virtual void flash_attention_forward(Stream& stream, const FlashArgs& a, const Tensor& out, const Tensor& lse,
                                       const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& workspace) = 0;
  virtual void flash_attention_backward(Stream& stream, const FlashArgs& a, const Tensor& dq, const Tensor& dk,
                                        const Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                                        const Tensor& v, const Tensor& out, const Tensor& lse,
                                        const Tensor& workspace) = 0;

  // --- losses. find_bad_target: the first row whose target is outside [0, vocab) and not ignored, or -1.
  virtual int64_t find_bad_target(Stream& stream, const Tensor& targets, const CrossEntropyArgs& a) = 0;
  virtual CrossEntropySums cross_entropy_forward(Stream& stream, const Tensor& loss, const Tensor& lse,
                                                 const Tensor& logits, const Tensor& targets,
                                                 const CrossEntropyArgs& a) = 0;
  virtual void cross_entropy_backward(Stream& stream, const Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                                      const Tensor& targets, const Tensor& row_grad, double scale,
                                      const CrossEntropyArgs& a) = 0;
  virtual int64_t count_not_ignored(Stream& stream, const Tensor& targets, int64_t ignore_index) = 0;
  // Returns the sum of the row losses; writes the gradients of hidden and weight (scaled by grad_scale).
  virtual double chunked_lm_loss_forward(Stream& stream, const Tensor& hidden, const Tensor& weight,
                                         const Tensor& targets, const Tensor& logits, const Tensor& row_loss,
                                         const Tensor& grad_hidden, const Tensor& grad_weight,
                                         const ChunkedLossArgs& a) = 0;

  // --- indexing (index tensors i32/i64)
  virtual void gather(Stream& stream, const Tensor& out, const Tensor& x, const Tensor& index, int dim) = 0;
  virtual void scatter_add(Stream& stream, const Tensor& out, const Tensor& src, const Tensor& index, int dim) = 0;
  // The first flat position whose index is outside [0, limit), or -1 (contiguous index).
  virtual int64_t first_out_of_range(Stream& stream, const Tensor& index, int64_t limit) = 0;
  // The largest index (contiguous, non-empty); its smallest into *min_out when not null.
  virtual int64_t index_max(Stream& stream, const Tensor& index, int64_t* min_out) = 0;
  virtual void topk(Stream& stream, const Tensor& values, const Tensor& indices, const Tensor& x, int dim, int64_t k,
                    bool largest, bool sorted) = 0;
  virtual void argsort(Stream& stream, const Tensor& indices, const Tensor& x, int dim, bool descending) = 0;
  virtual void bincount(Stream& stream, const Tensor& counts, const Tensor& index) = 0;

  // --- optimizer: one AdamW update of param (and its f32 master copy when defined)
  virtual void adamw_step(Stream& stream, const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                          const Tensor& exp_avg_sq, const Tensor& master, const AdamWArgs& a) = 0;
};

// The kernels to run for an op that writes `out`, or nullptr when there is nothing to run: `out` is
// a meta tensor (shapes and accounting only). The one place the meta device is handled: while a cost
// sink is installed (backend/meta/cost_kernels.h) a meta tensor gets the cost-recording kernels,
// which read no data and return stand-ins (so an op reads values only through its kernels).
Kernels* kernels_for(const Tensor& out);
// The kernels of a device. A meta device is planned as the device it stands in for (the cpu today),
// so its layout rules are that device's; its kernels are never run (use kernels_for).
Kernels& device_kernels(Device device);

}  // namespace tidal
