#pragma once
// The seam between device-neutral ops and a device's kernels. Note [Backend seam] in
// docs/architecture.md: ops/ allocates outputs (so every byte is accounted on every device, meta
// included), checks shapes, records autograd, then asks kernels_for(output) for the kernels to run.
// A backend (backend/<device>/) derives from Kernels and registers itself (seam/registry.h);
// nothing in ops/, autograd/, memory/ or models/ names a device.
//
// Every kernel of Kernels throws "no <device> kernel for <name>" until a backend defines it, so a new
// device comes up kernel by kernel: it compiles with none, and what it lacks fails clearly at run
// time; the test missing_kernels lists what each registered backend still lacks.
//
// Every kernel takes the stream it runs on first: the current stream of its output's device
// (stream.h current_stream; PyTorch's current stream, MLX's StreamOrDevice). A device with queues
// launches there; the CPU backend runs every kernel on the calling thread, the compute stream's
// semantics. A kernel that returns a value has finished when it returns.
//
// Composite kernels (the last section) are the exception: each has a default built from the kernels
// above, bit for bit what its op ran before it called it, and a backend may replace it with one fused
// kernel (the CUDA backend's cuBLASLt bias epilogue, its multi-tensor AdamW). They are never missing.
//
// Kernels write into preallocated outputs and read inputs with any strides unless a comment says
// "contiguous". Floating kernels accumulate in f32 for bf16 (f64 for f64).
#include <concepts>
#include <cstdint>
#include <span>
#include <string>

#include "tidal/device.h"
#include "tidal/seam/kernel_args.h"

namespace tidal {

class Stream;
class Tensor;

// The parameter names document the kernels; a kernel a backend does not define uses none of them.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
class Kernels {
 public:
  virtual ~Kernels() = default;
  virtual const char* name() const = 0;  // the device: "cpu", "cuda"
  // What the kernels run on, as `tidal info` prints it: "  gemm           oneDNN (f32); ...\n" lines.
  virtual std::string describe() const = 0;

  // --- layout rules: pure functions of shapes, valid for meta tensors too (they size workspaces
  // and decide operand copies, which the accounting sees)
  virtual bool matmul_operand_ok(int64_t rows, int64_t cols, int64_t stride_r, int64_t stride_c) const {
    missing("matmul_operand_ok");
  }
  // Bytes of device memory the products keep from the first one on a stream until the process ends
  // (CUDA: cuBLASLt's workspace), category temporary; dry runs hold as much from their first product.
  virtual int64_t matmul_kept_workspace() const { missing("matmul_kept_workspace"); }
  // The partial-sum rows of the norm weight grads (the workspace's first dim).
  virtual int64_t norm_row_chunks(int64_t rows) const { missing("norm_row_chunks"); }
  virtual int64_t flash_forward_workspace(const FlashArgs& cfg, const Tensor& q, const Tensor& k,
                                          const Tensor& v) const {
    missing("flash_forward_workspace");
  }
  virtual int64_t flash_backward_workspace(const FlashArgs& cfg, const Tensor& dq, const Tensor& q, const Tensor& k,
                                           const Tensor& v) const {
    missing("flash_backward_workspace");
  }
  // Elements (of the accumulate type) sparse_attention_backward's workspace holds (below).
  virtual int64_t sparse_attention_backward_workspace(const Tensor& q, const Tensor& kept) const {
    missing("sparse_attention_backward_workspace");
  }

  // --- host transfers (contiguous device tensors; bytes in the tensor's dtype)
  virtual void copy_from_host(Stream& stream, const Tensor& dst, const void* src) { missing("copy_from_host"); }
  virtual void copy_to_host(Stream& stream, void* dst, const Tensor& src) { missing("copy_to_host"); }

  // --- elementwise (inputs broadcast to the output's shape)
  virtual void unary(Stream& stream, Unary op, const Tensor& out, const Tensor& in, double s) { missing("unary"); }
  virtual void binary(Stream& stream, Binary op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
    missing("binary");
  }
  // out (u8) = a op b.
  virtual void compare(Stream& stream, Compare op, const Tensor& out, const Tensor& a, const Tensor& b) {
    missing("compare");
  }
  virtual void compare_scalar(Stream& stream, Compare op, const Tensor& out, const Tensor& a, double s) {
    missing("compare_scalar");
  }
  virtual void where(Stream& stream, const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
    missing("where");
  }
  virtual void masked_fill(Stream& stream, const Tensor& out, const Tensor& x, const Tensor& mask, double value) {
    missing("masked_fill");
  }
  virtual void copy(Stream& stream, const Tensor& dst, const Tensor& src) { missing("copy"); }  // converts dtype
  virtual void fill(Stream& stream, const Tensor& dst, double value) { missing("fill"); }
  virtual void add_inplace(Stream& stream, const Tensor& dst, const Tensor& src, double alpha) {
    missing("add_inplace");
  }

  // --- random (contiguous outputs; Philox key `seed`, element i at stream position start + i)
  virtual void random_fill(Stream& stream, const Tensor& out, Distribution dist, uint64_t seed, uint64_t start) {
    missing("random_fill");
  }
  virtual void randint_fill(Stream& stream, const Tensor& out, int64_t low, int64_t high, uint64_t seed,
                            uint64_t start) {
    missing("randint_fill");
  }
  // out = keep ? x * scale : 0 with keep = uniform >= p; mask (u8) = keep. x contiguous.
  virtual void dropout_forward(Stream& stream, const Tensor& out, const Tensor& mask, const Tensor& x, double p,
                               double scale, uint64_t seed, uint64_t start) {
    missing("dropout_forward");
  }
  virtual void dropout_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& mask, double scale) {
    missing("dropout_backward");
  }
  // dropout_forward with the stream positions of DropoutRowsArgs (a piece of a larger tensor). x contiguous.
  virtual void dropout_rows_forward(Stream& stream, const DropoutRowsArgs& a, const Tensor& out, const Tensor& mask,
                                    const Tensor& x, double p, double scale) {
    missing("dropout_rows_forward");
  }

  // --- activations
  virtual void gelu_forward(Stream& stream, const Tensor& out, const Tensor& x, bool tanh_approx) {
    missing("gelu_forward");
  }
  virtual void gelu_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& x, bool tanh_approx) {
    missing("gelu_backward");
  }
  virtual void silu_forward(Stream& stream, const Tensor& out, const Tensor& x) { missing("silu_forward"); }
  virtual void silu_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& x) {
    missing("silu_backward");
  }
  // out = act(gate) * up (SwiGLU, GeGLU).
  virtual void glu_forward(Stream& stream, const Tensor& out, const Tensor& gate, const Tensor& up, GluActivation act) {
    missing("glu_forward");
  }
  // dgate = g * up * act'(gate), dup = g * act(gate), in one pass; either may be undefined (not needed).
  virtual void glu_backward(Stream& stream, const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate,
                            const Tensor& up, GluActivation act) {
    missing("glu_backward");
  }

  // --- reductions over dim of a contiguous (outer, n, inner) view
  virtual void sum(Stream& stream, const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner,
                   double scale) {
    missing("sum");
  }
  virtual void max(Stream& stream, const Tensor& values, const Tensor& indices, const Tensor& x, int64_t outer,
                   int64_t n, int64_t inner) {
    missing("max");
  }
  virtual void max_backward(Stream& stream, const Tensor& grad_in, const Tensor& g, const Tensor& indices,
                            int64_t outer, int64_t n, int64_t inner) {
    missing("max_backward");
  }
  // partials[c] = Σ x² over elements [c·chunk, (c+1)·chunk) of contiguous x, in f64: ⌈numel/chunk⌉
  // values, each independent of the thread count (the gradient norm's deterministic partial sums).
  virtual void sum_of_squares(Stream& stream, const Tensor& x, int64_t chunk, double* partials) {
    missing("sum_of_squares");
  }

  // --- matrix product: out = alpha * a @ b + beta * out (batch dims broadcast). a and b share a dtype;
  // out has it too, except that bf16 operands may write an f32 out (f32 accumulation either way).
  virtual void matmul(Stream& stream, const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
    missing("matmul");
  }

  // --- softmax, norms, RoPE, embedding
  virtual void softmax_forward(Stream& stream, const Tensor& out, const Tensor& x, const SoftmaxArgs& a) {
    missing("softmax_forward");
  }
  virtual void softmax_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& y,
                                const SoftmaxArgs& a) {
    missing("softmax_backward");
  }
  virtual void layer_norm_forward(Stream& stream, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                  const Tensor& x, const Tensor& weight, const Tensor& bias, const NormArgs& a) {
    missing("layer_norm_forward");
  }
  virtual void layer_norm_backward(Stream& stream, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                   const Tensor& workspace, const Tensor& g, const Tensor& x, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& weight, const NormArgs& a) {
    missing("layer_norm_backward");
  }
  virtual void rms_norm_forward(Stream& stream, const Tensor& out, const Tensor& rstd, const Tensor& x,
                                const Tensor& weight, const NormArgs& a) {
    missing("rms_norm_forward");
  }
  virtual void rms_norm_backward(Stream& stream, const Tensor& dx, const Tensor& dweight, const Tensor& workspace,
                                 const Tensor& g, const Tensor& x, const Tensor& rstd, const Tensor& weight,
                                 const NormArgs& a) {
    missing("rms_norm_backward");
  }
  virtual void rope_tables(Stream& stream, const Tensor& cos, const Tensor& sin, const RopeTableArgs& a) {
    missing("rope_tables");
  }
  virtual void rope(Stream& stream, const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
                    bool transpose) {
    missing("rope");
  }
  virtual void embedding_forward(Stream& stream, const Tensor& out, const Tensor& weight, const Tensor& ids) {
    missing("embedding_forward");
  }
  virtual void embedding_backward(Stream& stream, const Tensor& grad_weight, const Tensor& g, const Tensor& ids) {
    missing("embedding_backward");
  }
  // Sinkhorn-Knopp: out = the projection of x. The backward recomputes the iterations per matrix
  // from x (n*n values each) and runs them in reverse: dx from g.
  virtual void sinkhorn_forward(Stream& stream, const Tensor& out, const Tensor& x, const SinkhornArgs& a) {
    missing("sinkhorn_forward");
  }
  virtual void sinkhorn_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& x,
                                 const SinkhornArgs& a) {
    missing("sinkhorn_backward");
  }

  // --- attention
  virtual void scaled_masked_softmax_forward(Stream& stream, const Tensor& probs, const Tensor& scores,
                                             const MaskedSoftmaxArgs& a) {
    missing("scaled_masked_softmax_forward");
  }
  virtual void scaled_masked_softmax_backward(Stream& stream, const Tensor& grad_scores, const Tensor& grad_probs,
                                              const Tensor& probs, double scale) {
    missing("scaled_masked_softmax_backward");
  }
  virtual void flash_attention_forward(Stream& stream, const FlashArgs& a, const Tensor& out, const Tensor& lse,
                                       const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& workspace) {
    missing("flash_attention_forward");
  }
  virtual void flash_attention_backward(Stream& stream, const FlashArgs& a, const Tensor& dq, const Tensor& dk,
                                        const Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                                        const Tensor& v, const Tensor& out, const Tensor& lse,
                                        const Tensor& workspace) {
    missing("flash_attention_backward");
  }
  // --- attention over per-query kept keys (ops/sparse_attention.h): q (B, Hq, T, D), keys
  // (B, Hkv, W, D), values (B, Hkv, W, Dv), out (B, Hq, T, Dv) any strides; kept (B, T, k) i32 contiguous (-1: an
  // empty slot); lse (B, Hq, T) contiguous in the accumulate type, -inf for a row with no key kept (out 0). The
  // backward writes dq, dk, dv whole (an undefined one is not computed); dlse (like lse) may be undefined (0).
  virtual void sparse_attention_forward(Stream& stream, double scale, const Tensor& out, const Tensor& lse,
                                        const Tensor& q, const Tensor& keys, const Tensor& values, const Tensor& kept) {
    missing("sparse_attention_forward");
  }
  virtual void sparse_attention_backward(Stream& stream, double scale, const Tensor& dq, const Tensor& dk,
                                         const Tensor& dv, const Tensor& dout, const Tensor& dlse, const Tensor& q,
                                         const Tensor& keys, const Tensor& values, const Tensor& kept,
                                         const Tensor& out, const Tensor& lse, const Tensor& workspace) {
    missing("sparse_attention_backward");
  }

  // --- losses. find_bad_target: the first row whose target is outside [0, vocab) and not ignored, or -1.
  virtual int64_t find_bad_target(Stream& stream, const Tensor& targets, const CrossEntropyArgs& a) {
    missing("find_bad_target");
  }
  virtual CrossEntropySums cross_entropy_forward(Stream& stream, const Tensor& loss, const Tensor& lse,
                                                 const Tensor& logits, const Tensor& targets,
                                                 const CrossEntropyArgs& a) {
    missing("cross_entropy_forward");
  }
  virtual void cross_entropy_backward(Stream& stream, const Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                                      const Tensor& targets, const Tensor& row_grad, double scale,
                                      const CrossEntropyArgs& a) {
    missing("cross_entropy_backward");
  }
  virtual int64_t count_not_ignored(Stream& stream, const Tensor& targets, int64_t ignore_index) {
    missing("count_not_ignored");
  }
  // Returns the sum of the row losses; writes the gradients of hidden and weight (scaled by grad_scale).
  virtual double chunked_lm_loss_forward(Stream& stream, const Tensor& hidden, const Tensor& weight,
                                         const Tensor& targets, const Tensor& logits, const Tensor& row_loss,
                                         const Tensor& grad_hidden, const Tensor& grad_weight,
                                         const ChunkedLossArgs& a) {
    missing("chunked_lm_loss_forward");
  }

  // --- indexing (index tensors i32/i64)
  virtual void gather(Stream& stream, const Tensor& out, const Tensor& x, const Tensor& index, int dim) {
    missing("gather");
  }
  virtual void scatter_add(Stream& stream, const Tensor& out, const Tensor& src, const Tensor& index, int dim) {
    missing("scatter_add");
  }
  // The first flat position whose index is outside [0, limit), or -1 (contiguous index).
  virtual int64_t first_out_of_range(Stream& stream, const Tensor& index, int64_t limit) {
    missing("first_out_of_range");
  }
  // The largest index (contiguous, non-empty); its smallest into *min_out when not null.
  virtual int64_t index_max(Stream& stream, const Tensor& index, int64_t* min_out) { missing("index_max"); }
  virtual void topk(Stream& stream, const Tensor& values, const Tensor& indices, const Tensor& x, int dim, int64_t k,
                    bool largest, bool sorted) {
    missing("topk");
  }
  virtual void argsort(Stream& stream, const Tensor& indices, const Tensor& x, int dim, bool descending) {
    missing("argsort");
  }
  virtual void bincount(Stream& stream, const Tensor& counts, const Tensor& index) { missing("bincount"); }

  // --- optimizer: one AdamW update of param (and its f32 master copy when defined)
  virtual void adamw_step(Stream& stream, const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                          const Tensor& exp_avg_sq, const Tensor& master, const AdamWArgs& a) {
    missing("adamw_step");
  }

  // --- composite kernels (seam/registry.h TIDAL_COMPOSITE_KERNEL_NAMES): defaults from the kernels above
  // out = a @ b + bias: linear's product, bias (n) broadcast over out's rows (..., m, n); a, b, out and
  // bias share a dtype, out contiguous. Default: bias copied into out, then the product added (beta 1).
  virtual void matmul_bias(Stream& stream, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) {
    copy(stream, out, bias);
    matmul(stream, out, a, b, 1.0, 1.0);
  }
  // Independent products (no task's out is another's operand or out): a grouped GEMM, as an MoE layer's
  // experts run on their rows. Default: each task's matmul in order. The CPU runs small tasks concurrently,
  // one thread each (Note [Grouped products] in backend/cpu/matmul.cpp): the same bits on every call, equal to
  // matmul's within rounding.
  virtual void matmul_many(Stream& stream, std::span<const MatmulTask> tasks) {
    for (const MatmulTask& t : tasks) matmul(stream, *t.out, *t.a, *t.b, t.alpha, t.beta);
  }
  // partials[i] = sum_of_squares(xs[i], chunk) for every i (the gradient norm's partial sums of every
  // gradient). Default: one call each, in order; a device backend reads all of them back at once.
  virtual void sum_of_squares_many(Stream& stream, std::span<const Tensor* const> xs, int64_t chunk,
                                   std::span<double* const> partials) {
    for (size_t i = 0; i < xs.size(); ++i) sum_of_squares(stream, *xs[i], chunk, partials[i]);
  }
  // x *= value for every x: clipping's scaling of every gradient. Default: each one's unary mul_scalar, in order.
  virtual void scale_many(Stream& stream, std::span<const Tensor* const> xs, double value) {
    for (const Tensor* x : xs) unary(stream, Unary::mul_scalar, *x, *x, value);
  }
  // dst += *rows[0], then += *rows[1], ... in order, each element on its own: a reduce-scatter's sum of every rank's
  // pieces in rank order (optim/distributed_adamw.cpp), bit for bit add_inplace of each row in turn, in one call
  // (a dry run records one kernel, not one per rank). dst and every row contiguous, of dst's shape and dtype.
  // Default: add_inplace of each row, in order.
  virtual void add_rows_inplace(Stream& stream, const Tensor& dst, std::span<const Tensor* const> rows) {
    for (const Tensor* row : rows) add_inplace(stream, dst, *row, 1.0);
  }
  // Every tensor's AdamW update of one optimizer step. Default: in order, each one's adamw_step, then
  // its bf16 copy when it has one (AdamWTensors).
  virtual void adamw_multi_step(Stream& stream, std::span<const AdamWTensors> tensors) {
    for (const AdamWTensors& t : tensors) {
      adamw_step(stream, *t.param, *t.grad, *t.exp_avg, *t.exp_avg_sq, *t.master, t.args);
      if (t.bf16_param != nullptr) copy(stream, *t.bf16_param, *t.param);
    }
  }

 protected:
  // Throws tidal::Error "[backend] no <name()> kernel for <kernel>": what every kernel a backend
  // does not define does.
  [[noreturn]] void missing(const char* kernel) const;
};
#pragma GCC diagnostic pop

// The kernels that run for an op on `device`, or nullptr when nothing runs: a meta device (shapes
// and accounting only). The one place the meta device is handled: while a cost sink is installed
// (seam/cost.h) the meta device's kernels run, which record what they would compute, read no data
// and return stand-ins (so an op reads values only through its kernels).
Kernels* kernels_for(Device device);
// kernels_for(out.device()) for the output `out` of an op. A template only so that this header needs
// Tensor's declaration, not its definition (tensor.h includes the seam, not the other way round).
template <std::same_as<Tensor> T>
Kernels* kernels_for(const T& out) {
  return kernels_for(out.device());
}
// The kernels of a registered device (seam/registry.h). Their layout rules hold for meta tensors too:
// the meta device's are those of the cpu, whose place it takes in a dry run.
Kernels& device_kernels(Device device);

}  // namespace tidal
