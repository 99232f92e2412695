#include "tidal/ops/attention.h"

#include "tidal/ops/view.h"

#include <cmath>

#include "tidal/base/checked_math.h"
#include "tidal/ops/common.h"
#include "tidal/ops/documents.h"
#include "tidal/ops/dropout_positions.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"
#include "tidal/ops/rope.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;

struct ScaledMaskedSoftmaxBackward : Node {
  SavedTensor probs;
  double scale = 1.0;
  const char* name() const override { return "ScaledMaskedSoftmaxBackward"; }
  TensorList apply(TensorList&& g) override {
    Tensor p = probs.unpack(name());
    Tensor gi = empty(p.shape(), p.dtype(), p.device());
    const Tensor gc = g[0].detach().contiguous();  // on meta too: the copy a real run makes
    if (Kernels* kern = kernels_for(gi))
      kern->scaled_masked_softmax_backward(current_stream(gi.device()), gi, gc, p, scale);
    return {gi};
  }
  void release_saved() override { probs.reset(); }
};

struct FlashAttentionBackward : Node {
  SavedTensor q, k, v, out, lse;
  FlashArgs cfg;
  Tensor documents;  // what cfg.documents points into, kept alive (a small constant, not a saved activation)
  const char* name() const override { return "FlashAttentionBackward"; }
  TensorList apply(TensorList&& grads) override {
    // attention_with_lse's second output: its gradient enters the softmax backward's delta (FlashArgs::lse_grad).
    const Tensor dlse = grads.size() > 1 && grads[1].defined() ? grads[1].detach().contiguous() : Tensor();
    if (!grads[0].defined() && !dlse.defined()) return {Tensor(), Tensor(), Tensor()};
    Tensor qv = q.unpack(name()), kv = k.unpack(name()), vv = v.unpack(name());
    const Tensor ov = out.unpack(name()), lv = lse.unpack(name());
    const Tensor g = grads[0].defined() ? grads[0].detach() : zeros(ov.shape(), ov.dtype(), ov.device());
    // Gradients in their inputs' memory order: the transposes back to (B, T, H, D) stay free.
    Tensor dq = needs_input_grad(0) ? empty_like_layout(qv, qv.dtype()) : Tensor();
    Tensor dk = needs_input_grad(1) ? empty_like_layout(kv, kv.dtype()) : Tensor();
    Tensor dv = needs_input_grad(2) ? empty_like_layout(vv, vv.dtype()) : Tensor();
    const DType acc = qv.dtype() == DType::f64 ? DType::f64 : DType::f32;
    // The log-sum-exp's gradient is set before the workspace is sized: a backend may take another path with it
    // (CUDA: its own kernels, not cuDNN's). On meta, whose tensors have no bytes, a stand-in address the cost
    // kernels never read says that there is one.
    FlashArgs args = cfg;
    static const char meta_lse_grad = 0;
    if (dlse.defined()) args.lse_grad = dlse.is_meta() ? static_cast<const void*>(&meta_lse_grad) : dlse.raw_data();
    Tensor ws = empty({device_kernels(qv.device()).flash_backward_workspace(args, dq, qv, kv, vv)}, acc, qv.device());
    // out and lse are unpacked above on meta too: a recompute's replayed output and statistics are freed as a real
    // run frees them.
    if (Kernels* kern = kernels_for(ws))
      kern->flash_attention_backward(current_stream(ws.device()), args, dq, dk, dv, g, qv, kv, vv, ov, lv, ws);
    return {dq, dk, dv};
  }
  void release_saved() override {
    autograd::reset_all(q, k, v, out, lse);
    documents = Tensor();
  }
};

void check_window(const char* op, bool causal, int64_t window) {
  TIDAL_CHECK(window >= 0, "[", op, "] the sliding window must be >= 0 (0: none), got ", window);
  TIDAL_CHECK(window == 0 || causal, "[", op, "] a sliding window (", window,
              ") needs causal attention: set causal = true or window = 0");
}

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opt) {
  const char* op = "scaled_dot_product_attention";
  detail::check_dim(op, q, 4, "q (B, Hq, T, D)");
  detail::check_dim(op, k, 4, "k (B, Hkv, S, D)");
  detail::check_dim(op, v, 4, "v (B, Hkv, S, Dv)");
  detail::check_floating(op, q);
  detail::check_same(op, q, k);
  detail::check_same(op, q, v);
  const auto shapes = [&] { return detail::str_cat("q ", q.shape(), ", k ", k.shape(), ", v ", v.shape()); };
  TIDAL_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0), "[", op, "] batch sizes differ: ", shapes());
  TIDAL_CHECK(v.size(1) == k.size(1) && v.size(2) == k.size(2), "[", op,
              "] k and v must have the same heads and length: ", shapes());
  TIDAL_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "[", op,
              "] query heads must be a multiple of kv heads (GQA): ", shapes());
  TIDAL_CHECK(k.size(3) == q.size(3), "[", op, "] q and k head dims differ: ", shapes());
  TIDAL_CHECK(q.size(3) > 0, "[", op, "] the head dim must be positive: ", shapes());
  TIDAL_CHECK(opt.dropout_p >= 0.0 && opt.dropout_p < 1.0, "[", op, "] dropout_p must be in [0, 1), got ",
              opt.dropout_p);
  TIDAL_CHECK(std::isfinite(opt.scale), "[", op, "] scale must be finite, got ", opt.scale);
  check_window(op, opt.causal, opt.window);
  check_documents(op, opt.documents, opt.key_offset, q.size(0), q.size(2), q);
  TIDAL_CHECK(opt.key_rate >= 0, "[", op, "] key_rate must be >= 0 (0: none), got ", opt.key_rate);
  TIDAL_CHECK(opt.key_rate == 0 || (opt.kernel == AttentionKernel::flash && opt.causal && opt.window == 0 &&
                                    !opt.documents.defined() && opt.dropout_p == 0),
              "[", op, "] compressed keys (key_rate ", opt.key_rate,
              ") need the flash kernel and causal attention without window, documents or dropout");
}

// AttentionOptions::scale, 0 meaning 1/sqrt(D).
double resolved_scale(const Tensor& q, const AttentionOptions& opt) {
  return opt.scale != 0 ? opt.scale : 1.0 / std::sqrt(double(q.size(3)));
}

// The dropout frame resolved: T_g, S_g and the count the whole matrix needs; refuses a frame that
// does not contain the call's block.
struct DropoutFrame {
  int64_t rows, cols;
  uint64_t count;
  bool is_default;
};
DropoutFrame resolve_frame(const Tensor& q, const Tensor& k, const AttentionDropoutFrame& f) {
  const char* op = "scaled_dot_product_attention";
  const int64_t t = q.size(2), s = k.size(2);
  TIDAL_CHECK(f.row_offset >= 0 && f.col_offset >= 0 && f.rows >= 0 && f.cols >= 0, "[", op,
              "] dropout_frame fields must be non-negative, got row_offset ", f.row_offset, ", col_offset ",
              f.col_offset, ", rows ", f.rows, ", cols ", f.cols);
  const int64_t rows = f.rows > 0 ? f.rows : t, cols = f.cols > 0 ? f.cols : s;
  TIDAL_CHECK(f.row_offset <= rows - t && f.col_offset <= cols - s, "[", op, "] dropout_frame (", rows, " x ", cols,
              " from row ", f.row_offset, ", column ", f.col_offset, ") does not contain the block of ", t,
              " query rows x ", s, " keys");
  const int64_t dims[] = {q.size(0), q.size(1), rows, cols};
  const uint64_t count = uint64_t(checked_product(dims, "[scaled_dot_product_attention] dropout_frame B*Hq*T_g*S_g"));
  TIDAL_CHECK(!f.rng || f.rng->count == count, "[", op, "] dropout_frame.rng holds ", f.rng ? f.rng->count : 0,
              " positions but the whole matrix (B*Hq*T_g*S_g) needs ", count,
              ": reserve it with reserve_attention_dropout(B, Hq, T_g, S_g)");
  const bool is_default = f.row_offset == 0 && f.col_offset == 0 && rows == t && cols == s && !f.rng;
  return {rows, cols, count, is_default};
}

// The frame's range, or one reserved now for the whole matrix.
RandomRange frame_range(const AttentionDropoutFrame& f, const DropoutFrame& r) {
  return f.rng ? *f.rng : reserve_random_range(r.count);
}

Tensor eager_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const AttentionOptions& opt,
                       const DropoutFrame& frame) {
  const int64_t b = q.size(0), hq = q.size(1), t = q.size(2), d = q.size(3);
  const int64_t hkv = k.size(1), s = k.size(2), dv = v.size(3), g = hq / hkv;
  // GQA without repeating k/v: fold the group's query heads into rows when q's layout allows (one
  // GEMM per kv head), else broadcast k over a group dim (one GEMM per query head).
  Tensor scores;  // (B, Hq, T, S)
  if (g == 1) {
    scores = matmul(q, k.mT());
  } else if (t == 1 || q.stride(1) == t * q.stride(2)) {
    scores = matmul(q.view({b, hkv, g * t, d}), k.mT()).view({b, hq, t, s});
  } else {
    scores = matmul(q.view({b, hkv, g, t, d}), k.unsqueeze(2).mT()).view({b, hq, t, s});
  }
  Tensor probs =
      scaled_masked_softmax(scores, scale, opt.causal, opt.window, opt.documents, opt.key_offset);  // (B, Hq, T, S)
  Tensor dropped;  // (B, Hq, T, S), saves a u8 mask
  if (frame.is_default || opt.dropout_p == 0) {
    dropped = dropout(probs, opt.dropout_p);
  } else {
    const RandomRange range = frame_range(opt.dropout_frame, frame);
    DropoutRowsArgs a;
    a.outer = b * hq;
    a.rows = t;
    a.inner = s;
    a.global_rows = frame.rows;
    a.global_inner = frame.cols;
    a.row_offset = opt.dropout_frame.row_offset;
    a.col_offset = opt.dropout_frame.col_offset;
    a.seed = range.seed;
    a.start = range.start;
    dropped = detail::dropout_at("dropout", probs, opt.dropout_p, a);  // the scope dropout() has
  }
  if (g == 1) return matmul(dropped, v);
  return matmul(dropped.view({b, hkv, g * t, s}), v).view({b, hq, t, dv});  // (B, Hq, T, Dv)
}

// lse_output: the log-sum-exp is an output too (attention_with_lse), kept and differentiable.
AttentionWithLse flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                 const AttentionOptions& opt, const DropoutFrame& frame, bool lse_output) {
  const int64_t b = q.size(0), hq = q.size(1), t = q.size(2), dv = v.size(3);
  FlashArgs cfg;
  cfg.scale = scale;
  cfg.causal = opt.causal;
  cfg.window = opt.window;
  cfg.documents = document_mask(opt.documents, opt.key_offset);
  cfg.key_rate = opt.key_rate;
  cfg.dropout_p = opt.dropout_p;
  if (opt.dropout_p > 0) {
    const RandomRange range = frame_range(opt.dropout_frame, frame);  // B*Hq*T*S by default
    cfg.seed = range.seed;
    cfg.rng_start = range.start;
    if (!frame.is_default) {
      cfg.rng_row_offset = opt.dropout_frame.row_offset;
      cfg.rng_col_offset = opt.dropout_frame.col_offset;
      cfg.rng_rows = frame.rows;
      cfg.rng_cols = frame.cols;
    }
  }
  Tensor out = empty({b, t, hq, dv}, q.dtype(), q.device()).transpose(1, 2);  // (B, Hq, T, Dv) view
  const bool grad = autograd::needs_grad(q, k, v);
  const DType acc = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor lse = grad || lse_output ? empty({b, hq, t}, acc, q.device()) : Tensor();  // (B, Hq, T)
  Tensor ws =
      empty({device_kernels(q.device()).flash_forward_workspace(cfg, q, k, v)}, acc, q.device());  // per-thread tiles
  if (Kernels* kern = kernels_for(out))
    kern->flash_attention_forward(current_stream(out.device()), cfg, out, lse, q.detach(), k.detach(), v.detach(), ws);
  if (grad) {
    auto node = autograd::make_node<FlashAttentionBackward>({&q, &k, &v});
    node->q = SavedTensor(q);
    node->k = SavedTensor(k);
    node->v = SavedTensor(v);
    node->out = SavedTensor(out);
    node->lse = SavedTensor(lse);
    node->cfg = cfg;
    node->documents = opt.documents;
    autograd::set_history(out, node);
    if (lse_output) autograd::set_history(lse, node, 1);
  }
  return {out, lse};
}

}  // namespace

RandomRange reserve_attention_dropout(int64_t batch, int64_t q_heads, int64_t rows, int64_t cols) {
  const int64_t dims[] = {batch, q_heads, rows, cols};
  return reserve_random_range(uint64_t(checked_product(dims, "[reserve_attention_dropout] B*Hq*T_g*S_g")));
}

Tensor scaled_masked_softmax(const Tensor& scores, double scale, bool causal, int64_t window, const Tensor& documents,
                             int64_t key_offset) {
  const char* op = "scaled_masked_softmax";
  OpScope scope(op);
  detail::check_floating(op, scores);
  check_window(op, causal, window);
  TIDAL_CHECK(scores.dim() >= 2, "[scaled_masked_softmax] scores must be (..., T, S), got ", scores.shape());
  if (documents.defined()) {
    TIDAL_CHECK(scores.dim() == 4, "[scaled_masked_softmax] with documents the scores must be (B, H, T, S), got ",
                scores.shape());
    check_documents(op, documents, key_offset, scores.size(0), scores.size(2), scores);
  }
  Tensor probs = empty(scores.shape(), scores.dtype(), scores.device());
  const Tensor sc = scores.detach().contiguous();  // on meta too: the copy a real run makes
  MaskedSoftmaxArgs a;
  a.scale = scale;
  a.causal = causal;
  a.window = window;
  a.documents = document_mask(documents, key_offset);
  a.batch = documents.defined() ? scores.size(0) : 1;
  if (Kernels* kern = kernels_for(probs))
    kern->scaled_masked_softmax_forward(current_stream(probs.device()), probs, sc, a);
  if (autograd::needs_grad(scores)) {
    auto node = autograd::make_node<ScaledMaskedSoftmaxBackward>({&scores});
    node->probs = SavedTensor(probs);
    node->scale = scale;
    autograd::set_history(probs, node);
  }
  return probs;
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opt) {
  OpScope scope("scaled_dot_product_attention");
  check_inputs(q, k, v, opt);
  const double scale = resolved_scale(q, opt);
  const DropoutFrame frame = resolve_frame(q, k, opt.dropout_frame);
  return opt.kernel == AttentionKernel::eager ? eager_attention(q, k, v, scale, opt, frame)
                                              : flash_attention(q, k, v, scale, opt, frame, false).out;
}

AttentionWithLse attention_with_lse(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opt) {
  OpScope scope("attention_with_lse");
  TIDAL_CHECK(
      opt.kernel == AttentionKernel::flash,
      "[attention_with_lse] the log-sum-exp comes from the flash kernel: set AttentionOptions::kernel to flash");
  check_inputs(q, k, v, opt);
  return flash_attention(q, k, v, resolved_scale(q, opt), opt, resolve_frame(q, k, opt.dropout_frame), true);
}

}  // namespace tidal
