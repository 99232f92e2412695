// Note [Cost kernels]
// Each kernel reports one KernelCost per call (the chunked loss one per BLAS call and row pass of
// each chunk, as the cpu kernel runs them) and writes nothing: its tensors are meta. What is counted:
// - FLOPs: a matrix product's 2·M·N·K per batch; a flash kernel's tile products exactly as the cpu
//   tiles run them (a causal tile's masked entries too, the backward's rowsum(dO·O) as well);
//   elementwise and row kernels a small per-element count (informational: they are bandwidth-bound).
// - bytes: every tensor the kernel reads once plus every tensor it writes once (a beta = 1 output and
//   an in-place update are read and written). Caches are not modelled: a flash kernel's K and V are
//   counted once, not once per query block.
// Kernels that return values return stand-ins that keep the callers on the path a real run takes
// without data: no bad target (-1), no index out of range (-1), every target counted (numel), loss
// sums 0, the largest index 0, host copies of zero bytes (a scalar read as 0), and gradient-norm
// partials of one per element (a norm of sqrt(numel), so clipping scales the gradients as an early
// real step does).
#include "tidal/seam/registry.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "tidal/backend/cpu/attention_flash.h"
#include "tidal/seam/cost.h"
#include "tidal/seam/planned_device.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

int64_t nb(const Tensor& t) { return t.defined() ? t.nbytes() : 0; }
int64_t ne(const Tensor& t) { return t.defined() ? t.numel() : 0; }

void report(const char* kernel, CostKind kind, DType dtype, int64_t flops, int64_t bytes) {
  report_cost({kernel, kind, dtype, flops, bytes});
}
// An elementwise-like kernel over `out`: `per` operations per output element.
void elementwise(const char* kernel, const Tensor& out, int64_t read_bytes, int64_t per, DType dtype) {
  report(kernel, CostKind::memory, dtype, per * ne(out), read_bytes + nb(out));
}

class CostKernels final : public Kernels {
 public:
  const char* name() const override { return "meta-cost"; }
  std::string describe() const override { return "  cost           recorded from shapes (meta device)\n"; }

  // Layout and scratch questions: the planned device's answers (seam/planned_device.h).
  bool matmul_operand_ok(int64_t rows, int64_t cols, int64_t stride_r, int64_t stride_c) const override {
    return planned_kernels().matmul_operand_ok(rows, cols, stride_r, stride_c);
  }
  int64_t matmul_kept_workspace() const override { return planned_kernels().matmul_kept_workspace(); }
  int64_t norm_row_chunks(int64_t rows) const override { return planned_kernels().norm_row_chunks(rows); }
  int64_t flash_forward_workspace(const FlashArgs& cfg, const Tensor& q, const Tensor& k,
                                  const Tensor& v) const override {
    return planned_kernels().flash_forward_workspace(cfg, q, k, v);
  }
  int64_t flash_backward_workspace(const FlashArgs& cfg, const Tensor& dq, const Tensor& q, const Tensor& k,
                                   const Tensor& v) const override {
    return planned_kernels().flash_backward_workspace(cfg, dq, q, k, v);
  }

  void copy_from_host(Stream&, const Tensor& dst, const void*) override {
    report("copy_from_host", CostKind::host_transfer, dst.dtype(), 0, nb(dst));
  }
  void copy_to_host(Stream&, void* dst, const Tensor& src) override {
    std::memset(dst, 0, size_t(nb(src)));  // host memory: the stand-in value 0
    report("copy_to_host", CostKind::host_transfer, src.dtype(), 0, nb(src));
  }

  void unary(Stream&, Unary, const Tensor& out, const Tensor& in, double) override {
    elementwise("unary", out, nb(in), 1, in.dtype());
  }
  void binary(Stream&, Binary, const Tensor& out, const Tensor& a, const Tensor& b, double) override {
    elementwise("binary", out, nb(a) + nb(b), 1, a.dtype());
  }
  void compare(Stream&, Compare, const Tensor& out, const Tensor& a, const Tensor& b) override {
    elementwise("compare", out, nb(a) + nb(b), 1, a.dtype());
  }
  void compare_scalar(Stream&, Compare, const Tensor& out, const Tensor& a, double) override {
    elementwise("compare_scalar", out, nb(a), 1, a.dtype());
  }
  void where(Stream&, const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override {
    elementwise("where", out, nb(cond) + nb(a) + nb(b), 1, a.dtype());
  }
  void masked_fill(Stream&, const Tensor& out, const Tensor& x, const Tensor& mask, double) override {
    elementwise("masked_fill", out, nb(x) + nb(mask), 1, x.dtype());
  }
  void copy(Stream&, const Tensor& dst, const Tensor& src) override {
    report("copy", CostKind::copy, src.dtype(), 0, ne(dst) * src.itemsize() + nb(dst));
  }
  void fill(Stream&, const Tensor& dst, double) override { elementwise("fill", dst, 0, 0, dst.dtype()); }
  void add_inplace(Stream&, const Tensor& dst, const Tensor& src, double) override {
    elementwise("add_inplace", dst, nb(src) + nb(dst), 2, dst.dtype());
  }
  void add_rows_inplace(Stream&, const Tensor& dst, std::span<const Tensor* const> rows) override {  // one record
    elementwise("add_rows_inplace", dst, int64_t(rows.size() + 1) * nb(dst), int64_t(rows.size()), dst.dtype());
  }

  void random_fill(Stream&, const Tensor& out, Distribution, uint64_t, uint64_t) override {
    elementwise("random_fill", out, 0, 10, out.dtype());
  }
  void randint_fill(Stream&, const Tensor& out, int64_t, int64_t, uint64_t, uint64_t) override {
    elementwise("randint_fill", out, 0, 10, out.dtype());
  }
  void dropout_forward(Stream&, const Tensor& out, const Tensor& mask, const Tensor& x, double, double, uint64_t,
                       uint64_t) override {
    elementwise("dropout_forward", out, nb(x) + nb(mask), 10, x.dtype());
  }
  void dropout_backward(Stream&, const Tensor& dx, const Tensor& g, const Tensor& mask, double) override {
    elementwise("dropout_backward", dx, nb(g) + nb(mask), 1, g.dtype());
  }
  void dropout_rows_forward(Stream&, const DropoutRowsArgs&, const Tensor& out, const Tensor& mask, const Tensor& x,
                            double, double) override {
    elementwise("dropout_rows_forward", out, nb(x) + nb(mask), 10, x.dtype());
  }

  void gelu_forward(Stream&, const Tensor& out, const Tensor& x, bool) override {
    elementwise("gelu_forward", out, nb(x), 8, x.dtype());
  }
  void gelu_backward(Stream&, const Tensor& dx, const Tensor& g, const Tensor& x, bool) override {
    elementwise("gelu_backward", dx, nb(g) + nb(x), 12, x.dtype());
  }
  void silu_forward(Stream&, const Tensor& out, const Tensor& x) override {
    elementwise("silu_forward", out, nb(x), 4, x.dtype());
  }
  void silu_backward(Stream&, const Tensor& dx, const Tensor& g, const Tensor& x) override {
    elementwise("silu_backward", dx, nb(g) + nb(x), 8, x.dtype());
  }
  // SwiGLU: a sigmoid and two multiplies forward; GeGLU's tanh form a few more.
  void glu_forward(Stream&, const Tensor& out, const Tensor& gate, const Tensor& up, GluActivation act) override {
    elementwise("glu_forward", out, nb(gate) + nb(up), act == GluActivation::silu ? 5 : 9, gate.dtype());
  }
  void glu_backward(Stream&, const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate,
                    const Tensor& up, GluActivation act) override {
    report("glu_backward", CostKind::memory, gate.dtype(), (act == GluActivation::silu ? 12 : 18) * ne(g),
           nb(g) + nb(gate) + nb(up) + nb(dgate) + nb(dup));
  }

  void sum(Stream&, const Tensor& out, const Tensor& x, int64_t, int64_t, int64_t, double) override {
    report("sum", CostKind::memory, x.dtype(), ne(x), nb(x) + nb(out));
  }
  void max(Stream&, const Tensor& values, const Tensor& indices, const Tensor& x, int64_t, int64_t, int64_t) override {
    report("max", CostKind::memory, x.dtype(), ne(x), nb(x) + nb(values) + nb(indices));
  }
  void max_backward(Stream&, const Tensor& grad_in, const Tensor& g, const Tensor& indices, int64_t, int64_t,
                    int64_t) override {
    report("max_backward", CostKind::memory, g.dtype(), 0, nb(grad_in) + nb(g) + nb(indices));
  }
  void sum_of_squares(Stream&, const Tensor& x, int64_t chunk, double* partials) override {
    const int64_t n = ne(x);
    for (int64_t c = 0; c * chunk < n; ++c) partials[c] = double(std::min(chunk, n - c * chunk));
    report("sum_of_squares", CostKind::memory, x.dtype(), 2 * n, nb(x));
  }

  void matmul(Stream&, const Tensor& out, const Tensor& a, const Tensor& b, double, double beta) override {
    const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
    const int64_t batch = out.numel() / std::max<int64_t>(m * n, 1);
    report("matmul", CostKind::gemm, a.dtype(), 2 * batch * m * n * k, nb(a) + nb(b) + nb(out) * (beta != 0 ? 2 : 1));
  }

  void softmax_forward(Stream&, const Tensor& out, const Tensor& x, const SoftmaxArgs&) override {
    elementwise("softmax_forward", out, nb(x), 5, x.dtype());
  }
  void softmax_backward(Stream&, const Tensor& dx, const Tensor& g, const Tensor& y, const SoftmaxArgs&) override {
    elementwise("softmax_backward", dx, nb(g) + nb(y), 4, y.dtype());
  }
  void layer_norm_forward(Stream&, const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                          const Tensor& weight, const Tensor& bias, const NormArgs&) override {
    report("layer_norm_forward", CostKind::memory, x.dtype(), 8 * ne(x),
           nb(x) + nb(weight) + nb(bias) + nb(out) + nb(mean) + nb(rstd));
  }
  void layer_norm_backward(Stream&, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                           const Tensor& workspace, const Tensor& g, const Tensor& x, const Tensor& mean,
                           const Tensor& rstd, const Tensor& weight, const NormArgs&) override {
    report("layer_norm_backward", CostKind::memory, x.dtype(), 12 * ne(x),
           nb(g) + nb(x) + nb(mean) + nb(rstd) + nb(weight) + nb(dx) + nb(dweight) + nb(dbias) + 2 * nb(workspace));
  }
  void rms_norm_forward(Stream&, const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                        const NormArgs&) override {
    report("rms_norm_forward", CostKind::memory, x.dtype(), 5 * ne(x), nb(x) + nb(weight) + nb(out) + nb(rstd));
  }
  void rms_norm_backward(Stream&, const Tensor& dx, const Tensor& dweight, const Tensor& workspace, const Tensor& g,
                         const Tensor& x, const Tensor& rstd, const Tensor& weight, const NormArgs&) override {
    report("rms_norm_backward", CostKind::memory, x.dtype(), 8 * ne(x),
           nb(g) + nb(x) + nb(rstd) + nb(weight) + nb(dx) + nb(dweight) + 2 * nb(workspace));
  }
  void rope_tables(Stream&, const Tensor& cos, const Tensor& sin, const RopeTableArgs&) override {
    report("rope_tables", CostKind::memory, cos.dtype(), 20 * ne(cos), nb(cos) + nb(sin));
  }
  void rope(Stream&, const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin, bool) override {
    elementwise("rope", out, nb(x) + nb(cos) + nb(sin), 3, x.dtype());
  }
  void embedding_forward(Stream&, const Tensor& out, const Tensor& weight, const Tensor& ids) override {
    elementwise("embedding_forward", out, nb(out) + nb(ids), 0, weight.dtype());  // the rows read: out's size
  }
  void embedding_backward(Stream&, const Tensor& grad_weight, const Tensor& g, const Tensor& ids) override {
    // Each row of g added into its row of grad_weight: g read, as many grad_weight bytes read and written.
    const int64_t rows = ne(g) * grad_weight.itemsize();
    report("embedding_backward", CostKind::memory, g.dtype(), ne(g), nb(g) + nb(ids) + 2 * rows);
  }
  // Attention over kept keys: each row reads its k keys and values (gathered, so memory-bound), 2 (D + Dv) flops a
  // key and head; the backward reads them again with dout and writes dq, dk, dv (2.5x the forward's products).
  int64_t sparse_attention_backward_workspace(const Tensor& q, const Tensor& kept) const override {
    return planned_kernels().sparse_attention_backward_workspace(q, kept);
  }
  void sparse_attention_forward(Stream&, double, const Tensor& out, const Tensor& lse, const Tensor& q,
                                const Tensor& keys, const Tensor& values, const Tensor& kept) override {
    const int64_t rows = q.size(0) * q.size(2) * kept.size(2) * keys.size(1);  // (b, i, slot, kv head) gathers
    const int64_t gathered = rows * (keys.size(3) + values.size(3)) * keys.itemsize();
    report("sparse_attention_forward", CostKind::memory, q.dtype(), 2 * ne(q) * kept.size(2) * 2,
           nb(q) + nb(out) + nb(lse) + nb(kept) + gathered);
  }
  void sparse_attention_backward(Stream&, double, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                 const Tensor& dout, const Tensor&, const Tensor& q, const Tensor& keys,
                                 const Tensor& values, const Tensor& kept, const Tensor& out, const Tensor& lse,
                                 const Tensor&) override {
    const int64_t rows = q.size(0) * q.size(2) * kept.size(2) * keys.size(1);
    const int64_t gathered = rows * (keys.size(3) + values.size(3)) * keys.itemsize();
    report("sparse_attention_backward", CostKind::memory, q.dtype(), 5 * ne(q) * kept.size(2) * 2,
           nb(q) + nb(dout) + nb(out) + nb(lse) + 2 * nb(kept) + 2 * gathered + nb(dq) + nb(dk) + nb(dv));
  }
  // Per step, a sum and a divide per element; the backward recomputes the steps, then two passes each.
  void sinkhorn_forward(Stream&, const Tensor& out, const Tensor& x, const SinkhornArgs& a) override {
    elementwise("sinkhorn_forward", out, nb(x), 2 * (2 * a.iters - 1), x.dtype());
  }
  void sinkhorn_backward(Stream&, const Tensor& dx, const Tensor& g, const Tensor& x, const SinkhornArgs& a) override {
    elementwise("sinkhorn_backward", dx, nb(g) + nb(x), 6 * (2 * a.iters - 1), x.dtype());
  }

  void scaled_masked_softmax_forward(Stream&, const Tensor& probs, const Tensor& scores,
                                     const MaskedSoftmaxArgs&) override {
    elementwise("scaled_masked_softmax_forward", probs, nb(scores), 6, scores.dtype());
  }
  void scaled_masked_softmax_backward(Stream&, const Tensor& grad_scores, const Tensor& grad_probs, const Tensor& probs,
                                      double) override {
    elementwise("scaled_masked_softmax_backward", grad_scores, nb(grad_probs) + nb(probs), 4, probs.dtype());
  }
  void flash_attention_forward(Stream&, const FlashArgs& a, const Tensor& out, const Tensor& lse, const Tensor& q,
                               const Tensor& k, const Tensor& v, const Tensor&) override {
    const int64_t flops = flash_forward_flops(q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3),
                                              a.causal, a.window, a.diagonal, a.key_rate);
    report("flash_attention_forward", CostKind::attention, q.dtype(), flops, nb(q) + nb(k) + nb(v) + nb(out) + nb(lse));
  }
  void flash_attention_backward(Stream&, const FlashArgs& a, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse, const Tensor&) override {
    const int64_t flops = flash_backward_flops(q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3),
                                               a.causal, dq.defined(), a.window, a.diagonal, a.key_rate);
    report("flash_attention_backward", CostKind::attention, q.dtype(), flops,
           nb(dout) + nb(q) + nb(k) + nb(v) + nb(out) + nb(lse) + nb(dq) + nb(dk) + nb(dv));
  }

  int64_t find_bad_target(Stream&, const Tensor&, const CrossEntropyArgs&) override { return -1; }
  CrossEntropySums cross_entropy_forward(Stream&, const Tensor& loss, const Tensor& lse, const Tensor& logits,
                                         const Tensor& targets, const CrossEntropyArgs& a) override {
    report("cross_entropy_forward", CostKind::memory, logits.dtype(), 4 * a.rows * a.vocab,
           a.rows * a.vocab * logits.itemsize() + nb(targets) + nb(loss) + nb(lse));
    return {0.0, targets.numel()};
  }
  void cross_entropy_backward(Stream&, const Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                              const Tensor& targets, const Tensor& row_grad, double,
                              const CrossEntropyArgs& a) override {
    report("cross_entropy_backward", CostKind::memory, logits.dtype(), 3 * a.rows * a.vocab,
           a.rows * a.vocab * logits.itemsize() + nb(lse) + nb(targets) + nb(row_grad) + nb(dlogits));
  }
  int64_t count_not_ignored(Stream&, const Tensor& targets, int64_t) override { return targets.numel(); }
  double chunked_lm_loss_forward(Stream&, const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                                 const Tensor& logits, const Tensor& row_loss, const Tensor& grad_hidden,
                                 const Tensor& grad_weight, const ChunkedLossArgs& a) override {
    (void)weight;
    const int64_t C = a.hidden, V = a.vocab, s = hidden.itemsize();
    const DType dt = hidden.dtype();
    for (int64_t r0 = 0; r0 < a.rows; r0 += a.chunk) {  // the cpu kernel's calls, chunk by chunk
      const int64_t n = std::min(a.chunk, a.rows - r0), x = n * V * s, w = V * C * s, h = n * C * s;
      const bool grad = grad_hidden.defined() || grad_weight.defined();
      report("chunked_lm_loss_logits", CostKind::gemm, dt, 2 * n * V * C, h + w + x);
      report("chunked_lm_loss_rows", CostKind::memory, dt, (grad ? 7 : 4) * n * V,
             x * (grad ? 2 : 1) + n * targets.itemsize() + n * s);
      if (grad_hidden.defined()) report("chunked_lm_loss_grad_hidden", CostKind::gemm, dt, 2 * n * C * V, x + w + h);
      if (grad_weight.defined())
        report("chunked_lm_loss_grad_weight", CostKind::gemm, dt, 2 * V * C * n, x + h + w * (r0 == 0 ? 1 : 2));
    }
    (void)logits;
    (void)row_loss;
    return 0.0;
  }

  void gather(Stream&, const Tensor& out, const Tensor& x, const Tensor& index, int) override {
    elementwise("gather", out, ne(out) * x.itemsize() + nb(index), 0, x.dtype());
  }
  void scatter_add(Stream&, const Tensor& out, const Tensor& src, const Tensor& index, int) override {
    report("scatter_add", CostKind::memory, src.dtype(), ne(src), nb(src) + nb(index) + 2 * ne(src) * out.itemsize());
  }
  int64_t first_out_of_range(Stream&, const Tensor&, int64_t) override { return -1; }
  int64_t index_max(Stream&, const Tensor&, int64_t* min_out) override {
    if (min_out != nullptr) *min_out = 0;
    return 0;
  }
  void topk(Stream&, const Tensor& values, const Tensor& indices, const Tensor& x, int, int64_t, bool, bool) override {
    report("topk", CostKind::memory, x.dtype(), 2 * ne(x), nb(x) + nb(values) + nb(indices));
  }
  void argsort(Stream&, const Tensor& indices, const Tensor& x, int, bool) override {
    report("argsort", CostKind::memory, x.dtype(), 8 * ne(x), nb(x) + nb(indices));
  }
  void bincount(Stream&, const Tensor& counts, const Tensor& index) override {
    report("bincount", CostKind::memory, index.dtype(), ne(index), nb(index) + 2 * nb(counts));
  }

  void adamw_step(Stream&, const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const Tensor& master, const AdamWArgs&) override {
    // param, both moments and the master copy read and written; the gradient read.
    report("adamw_step", CostKind::optimizer, param.dtype(), 14 * ne(param),
           2 * (nb(param) + nb(exp_avg) + nb(exp_avg_sq) + nb(master)) + nb(grad));
  }

 private:
};

// The meta device's kernels: run only while a cost sink is installed (kernels_for).
[[gnu::init_priority(kRegisterBackends)]] const RegisterKernels<CostKernels> registered(DeviceType::meta);

// Query blocks of `rows` rows over T queries: the sum over blocks of f(first row, rows in the block).
template <typename F>
int64_t over_blocks(int64_t T, int64_t block, int64_t first, F f) {
  int64_t total = 0;
  for (int64_t i0 = first; i0 < T; i0 += block) total += f(i0, std::min(block, T - i0));
  return total;
}

}  // namespace

namespace {
FlashArgs mask_of(bool causal, int64_t window, int64_t diagonal, int64_t key_rate) {
  FlashArgs a;
  a.causal = causal;
  a.window = window;
  a.diagonal = diagonal;
  a.key_rate = key_rate;
  return a;
}
}  // namespace

int64_t flash_forward_flops(int64_t B, int64_t Hq, int64_t T, int64_t S, int64_t D, int64_t Dv, bool causal,
                            int64_t window, int64_t diagonal, int64_t key_rate) {
  const cpu::FlashTiles tiles = cpu::flash_tiles();
  const FlashArgs mask = mask_of(causal, window, diagonal, key_rate);
  // Each query block multiplies Q K^T and P V over the keys its rows see (its first row's first key
  // to its last row's diagonal), in key tiles that sum to them.
  const int64_t per_head = over_blocks(T, tiles.fwd_q, 0, [&](int64_t i0, int64_t nq) {
    const int64_t first = visible_key_range(mask, 0, i0, T, S).first,
                  end = visible_key_range(mask, 0, i0 + nq - 1, T, S).end;
    return 2 * nq * std::max<int64_t>(0, end - first) * (D + Dv);
  });
  return B * Hq * per_head;
}

int64_t flash_backward_flops(int64_t B, int64_t Hq, int64_t T, int64_t S, int64_t D, int64_t Dv, bool causal,
                             bool with_dq, int64_t window, int64_t diagonal, int64_t key_rate) {
  const cpu::FlashTiles tiles = cpu::flash_tiles();
  const FlashArgs mask = mask_of(causal, window, diagonal, key_rate);
  // Per key tile: S = Q K^T, dP = dO V^T, dV += P^T dO, dK += dS^T Q (and dQ += dS K) over the query
  // blocks that see the tile; then rowsum(dO * O), the backward's delta.
  int64_t per_head = 0;
  for (int64_t j0 = 0; j0 < S; j0 += tiles.bwd_k) {
    const int64_t nk = std::min(tiles.bwd_k, S - j0);
    const RowRange seen = rows_seeing_keys(mask, j0, j0 + nk, T, S);
    if (seen.first >= seen.end) continue;
    const int64_t last_block_end = std::min(T, (seen.end + tiles.bwd_q - 1) / tiles.bwd_q * tiles.bwd_q);
    const int64_t rows = last_block_end - seen.first / tiles.bwd_q * tiles.bwd_q;
    per_head += 2 * nk * rows * (2 * D + 2 * Dv + (with_dq ? D : 0));
  }
  return B * Hq * (per_head + 2 * T * Dv);
}

}  // namespace tidal
