#include "tidal/ops/sparse_attention.h"

#include <cmath>

#include "tidal/ops/common.h"
#include "tidal/ops/view.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;

struct SparseAttentionBackward : Node {
  SavedTensor q, keys, values, kept, out, lse;
  double scale = 1.0;
  const char* name() const override { return "SparseAttentionBackward"; }
  TensorList apply(TensorList&& grads) override {
    const Tensor dlse = grads.size() > 1 && grads[1].defined() ? grads[1].detach().contiguous() : Tensor();
    if (!grads[0].defined() && !dlse.defined()) return {Tensor(), Tensor(), Tensor()};
    const Tensor qv = q.unpack(name()), kv = keys.unpack(name()), vv = values.unpack(name());
    const Tensor idx = kept.unpack(name()), ov = out.unpack(name()), lv = lse.unpack(name());
    const Tensor g = grads[0].defined() ? grads[0].detach() : zeros(ov.shape(), ov.dtype(), ov.device());
    Tensor dq = needs_input_grad(0) ? empty_like_layout(qv, qv.dtype()) : Tensor();
    Tensor dk = needs_input_grad(1) ? empty_like_layout(kv, kv.dtype()) : Tensor();
    Tensor dv = needs_input_grad(2) ? empty_like_layout(vv, vv.dtype()) : Tensor();
    Tensor ws = empty({device_kernels(qv.device()).sparse_attention_backward_workspace(qv, idx)}, lv.dtype(),
                      qv.device());  // P and dS of every kept slot
    if (Kernels* kern = kernels_for(ws))
      kern->sparse_attention_backward(current_stream(ws.device()), scale, dq, dk, dv, g, dlse, qv, kv, vv, idx, ov, lv,
                                      ws);
    return {dq, dk, dv};
  }
  void release_saved() override { autograd::reset_all(q, keys, values, kept, out, lse); }
};

void check_inputs(const Tensor& q, const Tensor& keys, const Tensor& values, const Tensor& kept) {
  const char* op = "sparse_attention_with_lse";
  detail::check_dim(op, q, 4, "q (B, Hq, T, D)");
  detail::check_dim(op, keys, 4, "keys (B, Hkv, W, D)");
  detail::check_dim(op, values, 4, "values (B, Hkv, W, Dv)");
  detail::check_dim(op, kept, 3, "kept (B, T, k)");
  detail::check_floating(op, q);
  detail::check_same(op, q, keys);
  detail::check_same(op, q, values);
  detail::check_same_device(op, q, kept);
  const auto shapes = [&] {
    return detail::str_cat("q ", q.shape(), ", keys ", keys.shape(), ", values ", values.shape(), ", kept ",
                           kept.shape());
  };
  TIDAL_CHECK(kept.dtype() == DType::i32, "[", op, "] kept must be i32, got ", dtype_name(kept.dtype()));
  TIDAL_CHECK(keys.size(0) == q.size(0) && values.size(0) == q.size(0) && kept.size(0) == q.size(0) &&
                  kept.size(1) == q.size(2),
              "[", op, "] batch or query length differ: ", shapes());
  TIDAL_CHECK(values.size(1) == keys.size(1) && values.size(2) == keys.size(2), "[", op,
              "] keys and values must have the same heads and length: ", shapes());
  TIDAL_CHECK(keys.size(1) > 0 && q.size(1) % keys.size(1) == 0, "[", op,
              "] query heads must be a multiple of key heads: ", shapes());
  TIDAL_CHECK(keys.size(3) == q.size(3) && q.size(3) > 0, "[", op, "] q and keys head dims differ: ", shapes());
  if (kept.is_meta()) return;
  const Tensor host = kept.to(Device::cpu()).contiguous();
  const int32_t* v = host.data<int32_t>();
  for (int64_t i = 0; i < host.numel(); ++i)
    TIDAL_CHECK(v[i] >= -1 && v[i] < keys.size(2), "[", op, "] kept index ", v[i], " at position ", i,
                " of the kept tensor ", kept.shape(), " is not in [-1, ", keys.size(2), "): ", shapes());
}

}  // namespace

AttentionWithLse sparse_attention_with_lse(const Tensor& q, const Tensor& keys, const Tensor& values,
                                           const Tensor& kept, double scale) {
  OpScope scope("sparse_attention_with_lse");
  check_inputs(q, keys, values, kept);
  TIDAL_CHECK(std::isfinite(scale), "[sparse_attention_with_lse] scale must be finite, got ", scale);
  if (scale == 0) scale = 1.0 / std::sqrt(double(q.size(3)));
  const int64_t b = q.size(0), hq = q.size(1), t = q.size(2), dv = values.size(3);
  const DType acc = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor out = empty({b, t, hq, dv}, q.dtype(), q.device()).transpose(1, 2);  // (B, Hq, T, Dv) view
  Tensor lse = empty({b, hq, t}, acc, q.device());                            // (B, Hq, T)
  const Tensor idx = kept.contiguous();
  if (Kernels* kern = kernels_for(out))
    kern->sparse_attention_forward(current_stream(out.device()), scale, out, lse, q.detach(), keys.detach(),
                                   values.detach(), idx);
  if (autograd::needs_grad(q, keys, values)) {
    auto node = autograd::make_node<SparseAttentionBackward>({&q, &keys, &values});
    node->q = SavedTensor(q);
    node->keys = SavedTensor(keys);
    node->values = SavedTensor(values);
    node->kept = SavedTensor(idx);
    node->out = SavedTensor(out);
    node->lse = SavedTensor(lse);
    node->scale = scale;
    autograd::set_history(out, node);
    autograd::set_history(lse, node, 1);
  }
  return {out, lse};
}

}  // namespace tidal
