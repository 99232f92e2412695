// Note [Chunked loss memory]
// What the chunked loss allocates, in MemoryCategory terms (docs/memory.md, "Chunked loss"):
// - one (min(chunk, N), V) buffer in the compute dtype (f32 for f32/bf16), category `logits`, alive
//   only during the forward call: the logits of one chunk, then their gradient in place;
// - the gradients w.r.t. the hidden rows (N, C) and the weight (V, C), in the inputs' dtype. They are
//   computed in forward and saved for backward, so — like every saved tensor — they count as
//   `activation` from the end of forward until the node's backward returns them. From then on they
//   are ordinary gradients: the hidden one flows into the final norm's backward, the weight one
//   becomes the LM head's .grad (category `gradient`; AccumulateGrad keeps the bytes, no copy).
// - the per-row losses (N), temporary, during forward.
// The default path holds the (N, V) logits (`logits`) from forward to backward plus, in backward, a
// (N, V) logits gradient (`temporary`); it saves the head input (N, C), the log-sum-exp and targets.
// Backward scales the stored gradients in place unless the incoming gradient is exactly 1 (the
// common case: they are then returned as they are).
#include "tidal/ops/chunked_loss.h"

#include <algorithm>
#include <cmath>

#include "tidal/ops/common.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;

struct ChunkedLmLossBackward : Node {
  SavedTensor grad_hidden, grad_weight;  // already multiplied by 1 / count
  const char* name() const override { return "ChunkedLmLossBackward"; }
  TensorList apply(TensorList&& grads) override {
    Tensor gh = grad_hidden.unpack(name()), gw = grad_weight.unpack(name());
    const Tensor& g = grads[0];
    if (Kernels* kern = kernels_for(g)) {  // a value to read (a meta tensor's cost kernels: a stand-in)
      const double s = detail::scalar_value(*kern, g);
      if (s != 1.0) {  // in place: a scaled copy would double the (V, C) gradient for a moment
        if (gh.defined()) gh.mul_(s);
        if (gw.defined()) gw.mul_(s);
      }
    }
    return {gh, gw};
  }
  void release_saved() override { autograd::reset_all(grad_hidden, grad_weight); }
};

void check_args(const Tensor& hidden, const Tensor& weight, const Tensor& targets, int64_t chunk_size) {
  detail::check_floating("chunked_lm_loss", hidden);
  detail::check_same("chunked_lm_loss", hidden, weight);
  detail::check_same_device("chunked_lm_loss", hidden, targets);
  TIDAL_CHECK(weight.dim() == 2 && weight.size(0) > 0, "[chunked_lm_loss] the weight must be (V, C) with V > 0, got ",
              weight.shape());
  TIDAL_CHECK((hidden.dim() == 2 || hidden.dim() == 3) && hidden.size(-1) == weight.size(1),
              "[chunked_lm_loss] hidden must be (B, T, C) or (N, C) with C = ", weight.size(1), " (weight ",
              weight.shape(), "), got ", hidden.shape());
  TIDAL_CHECK(targets.dtype() == DType::i64 || targets.dtype() == DType::i32,
              "[chunked_lm_loss] targets must be class indices (i64 or i32), got ", targets.dtype(), " ",
              targets.shape());
  Shape rows = hidden.shape();
  rows.erase(rows.size() - 1);
  TIDAL_CHECK(targets.shape() == rows, "[chunked_lm_loss] targets ", targets.shape(),
              " must have the leading shape of hidden ", hidden.shape(), ", i.e. ", rows);
  TIDAL_CHECK(chunk_size >= 1, "[chunked_lm_loss] chunk_size must be >= 1 rows, got ", chunk_size);
}

}  // namespace

Tensor chunked_lm_loss(const Tensor& hidden, const Tensor& weight, const Tensor& targets, int64_t chunk_size,
                       int64_t ignore_index) {
  OpScope scope("chunked_lm_loss");
  check_args(hidden, weight, targets, chunk_size);
  const int64_t C = weight.size(1), V = weight.size(0), N = hidden.numel() / C;
  const Device dev = hidden.device();
  const DType acc = hidden.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const bool need_gh = autograd::needs_grad(hidden), need_gw = autograd::needs_grad(weight);

  Tensor h = hidden.detach().reshape({N, C}).contiguous().to(acc);  // (N, C) no copy unless strided or bf16
  Tensor w = weight.detach().contiguous().to(acc);                  // (V, C) no copy unless bf16
  Tensor tc = targets.reshape({N}).contiguous();                    // (N)
  Tensor gh, gw;
  {
    MemoryScope temporary(MemoryCategory::temporary);  // saved below: activations until backward
    if (need_gh) gh = empty({N, C}, acc, dev);
    if (need_gw) gw = N == 0 ? zeros({V, C}, acc, dev) : empty({V, C}, acc, dev);
  }
  Tensor logits;
  {
    MemoryScope category(MemoryCategory::logits);
    logits = empty({std::min(chunk_size, N), V}, acc, dev);  // (chunk, V): the only logits there are
  }
  Tensor row_loss = empty({N}, acc, dev);  // (N)
  Tensor out = empty(Shape{}, acc, dev);   // f32 for bf16: mixed precision's fp32 loss, like cross_entropy
  if (Kernels* kern = kernels_for(out)) {
    CrossEntropyArgs ce;
    ce.rows = N;
    ce.vocab = V;
    ce.ignore_index = ignore_index;
    const int64_t bad = kern->find_bad_target(current_stream(out.device()), tc, ce);
    if (bad >= 0) {
      const int64_t value = tc.narrow(0, bad, 1).to(DType::i64).item<int64_t>();
      detail::throw_error(detail::str_cat("[chunked_lm_loss] target ", value, " at position ", bad, " of targets ",
                                          targets.shape(), " is out of range for ", V, " classes (weight ",
                                          weight.shape(), "): targets must be in [0, ", V, ") or equal ignore_index ",
                                          ignore_index));
    }
    ChunkedLossArgs a;
    a.rows = N;
    a.hidden = C;
    a.vocab = V;
    a.chunk = chunk_size;
    a.ignore_index = ignore_index;
    const int64_t count = kern->count_not_ignored(current_stream(out.device()), tc, ignore_index);
    a.grad_scale = 1.0 / double(count);  // inf when all are ignored: then every row's gradient is 0 anyway
    const double sum =
        kern->chunked_lm_loss_forward(current_stream(out.device()), h, w, tc, logits, row_loss, gh, gw, a);
    out.fill_(sum / double(count));  // 0 / 0 = NaN when all are ignored, like cross_entropy
  }
  logits = row_loss = h = w = Tensor();  // free before the bf16 gradients are made
  if (!need_gh && !need_gw) return out;
  if (hidden.dtype() != acc) {
    MemoryScope temporary(MemoryCategory::temporary);
    if (gh.defined()) gh = gh.to(hidden.dtype());
    if (gw.defined()) gw = gw.to(hidden.dtype());
  }
  auto node = autograd::make_node<ChunkedLmLossBackward>({&hidden, &weight});
  node->grad_hidden = SavedTensor(gh.defined() ? gh.view(hidden.shape()) : gh);
  node->grad_weight = SavedTensor(gw);
  autograd::set_history(out, node);
  return out;
}

}  // namespace tidal
