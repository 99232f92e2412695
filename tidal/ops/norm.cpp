#include "tidal/ops/norm.h"

#include <cmath>

#include "tidal/ops/common.h"
#include "tidal/ops/reduce.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;

DType acc_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// x without its last dim: the shape of the per-row statistics.
Shape rows_shape(const Tensor& x) {
  Shape s = x.shape();
  s.erase(s.size() - 1);
  return s;
}

NormArgs norm_args(const Tensor& x, double eps) { return {x.numel() / x.size(-1), x.size(-1), eps}; }

void check_input(const char* op, const Tensor& x, double eps) {
  detail::check_floating(op, x);
  TIDAL_CHECK(x.dim() >= 1 && x.size(-1) > 0, "[", op, "] needs an input with a non-empty last dim, got ", x.shape());
  TIDAL_CHECK(eps >= 0.0, "[", op, "] eps must be >= 0, got ", eps);
}

void check_param(const char* op, const Tensor& x, const Tensor& p, const char* what) {
  if (!p.defined()) return;
  detail::check_same(op, x, p);
  TIDAL_CHECK(p.dim() == 1 && p.size(0) == x.size(-1), "[", op, "] ", what, " must be (", x.size(-1),
              ") to match the last dim of the input ", x.shape(), ", got ", p.shape());
}

// The bytes a kernel reads: contiguous (a copy only for strided views).
Tensor dense(const Tensor& t) { return t.defined() ? t.detach().contiguous() : t; }

struct LayerNormBackward : Node {
  SavedTensor x, mean, rstd, weight;
  bool has_weight = false, has_bias = false;
  const char* name() const override { return "LayerNormBackward"; }
  TensorList apply(TensorList&& grads) override {
    const Tensor& g = grads[0];
    const bool want_dx = needs_input_grad(0), want_dw = has_weight && needs_input_grad(1);
    const bool want_db = has_bias && needs_input_grad(2);
    if (!want_dx && !want_dw) return {Tensor(), Tensor(), want_db ? sum_to(g, Shape{g.size(-1)}) : Tensor()};
    Tensor xv = x.unpack(name());
    const int64_t C = xv.size(-1);
    const NormArgs a = norm_args(xv, 0.0);
    Tensor dx = want_dx ? empty(xv.shape(), xv.dtype(), xv.device()) : Tensor();
    Tensor dw = want_dw ? empty(Shape{C}, xv.dtype(), xv.device()) : Tensor();
    Tensor db = want_db ? empty(Shape{C}, xv.dtype(), xv.device()) : Tensor();
    Tensor ws;  // (chunks, 2, C) partial dweight/dbias, Note [Deterministic parameter gradients]
    const int64_t chunks = device_kernels(xv.device()).norm_row_chunks(a.rows);
    if (want_dw || want_db) ws = empty(Shape{chunks, 2, C}, acc_dtype(xv.dtype()), xv.device());
    // Unpacked on meta too: a recompute's replayed statistics are freed as a real run frees them.
    const Tensor gd = dense(g), xd = dense(xv), mv = mean.unpack(name()), rv = rstd.unpack(name());
    const Tensor wv = want_dx ? dense(weight.unpack(name())) : Tensor();
    if (Kernels* kern = kernels_for(xv))
      kern->layer_norm_backward(current_stream(xv.device()), dx, dw, db, ws, gd, xd, mv, rv, wv, a);
    return {dx, dw, db};
  }
  void release_saved() override { autograd::reset_all(x, mean, rstd, weight); }
};

struct RmsNormBackward : Node {
  SavedTensor x, rstd, weight;
  bool has_weight = false;
  double weight_offset = 0.0;
  const char* name() const override { return "RmsNormBackward"; }
  TensorList apply(TensorList&& grads) override {
    const bool want_dx = needs_input_grad(0), want_dw = has_weight && needs_input_grad(1);
    Tensor xv = x.unpack(name());
    const int64_t C = xv.size(-1);
    NormArgs a = norm_args(xv, 0.0);
    a.weight_offset = weight_offset;
    Tensor dx = want_dx ? empty(xv.shape(), xv.dtype(), xv.device()) : Tensor();
    Tensor dw = want_dw ? empty(Shape{C}, xv.dtype(), xv.device()) : Tensor();
    const int64_t chunks = device_kernels(xv.device()).norm_row_chunks(a.rows);
    Tensor ws = want_dw ? empty(Shape{chunks, C}, acc_dtype(xv.dtype()), xv.device()) : Tensor();
    // Unpacked on meta too: a recompute's replayed statistics are freed as a real run frees them.
    const Tensor gd = dense(grads[0]), xd = dense(xv), rv = rstd.unpack(name());
    const Tensor wv = want_dx ? dense(weight.unpack(name())) : Tensor();
    if (Kernels* kern = kernels_for(xv))
      kern->rms_norm_backward(current_stream(xv.device()), dx, dw, ws, gd, xd, rv, wv, a);
    return {dx, dw};
  }
  void release_saved() override { autograd::reset_all(x, rstd, weight); }
};

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  OpScope scope("layer_norm");
  check_input("layer_norm", x, eps);
  check_param("layer_norm", x, weight, "weight");
  check_param("layer_norm", x, bias, "bias");
  Tensor out = empty(x.shape(), x.dtype(), x.device());                  // (..., C)
  Tensor mean = empty(rows_shape(x), acc_dtype(x.dtype()), x.device());  // (...)
  Tensor rstd = empty(rows_shape(x), acc_dtype(x.dtype()), x.device());  // (...)
  const Tensor xd = dense(x), wd = dense(weight), bd = dense(bias);      // on meta too: a real run's copies
  if (Kernels* kern = kernels_for(out))
    kern->layer_norm_forward(current_stream(out.device()), out, mean, rstd, xd, wd, bd, norm_args(x, eps));
  if (autograd::needs_grad(x, weight, bias)) {
    auto node = autograd::make_node<LayerNormBackward>({&x, &weight, &bias});
    node->has_weight = weight.defined();
    node->has_bias = bias.defined();
    const bool need_x = x.requires_grad(), need_w = weight.defined() && weight.requires_grad();
    if (need_x || need_w) {  // dbias alone needs only the incoming gradient
      node->x = SavedTensor(x);
      node->mean = SavedTensor(mean);
      node->rstd = SavedTensor(rstd);
    }
    if (need_x) node->weight = SavedTensor(weight);
    autograd::set_history(out, node);
  }
  return out;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps, double weight_offset) {
  OpScope scope("rms_norm");
  check_input("rms_norm", x, eps);
  check_param("rms_norm", x, weight, "weight");
  TIDAL_CHECK(weight_offset == 0.0 || weight.defined(), "[rms_norm] a weight_offset needs a weight");
  TIDAL_CHECK(std::isfinite(weight_offset), "[rms_norm] weight_offset must be finite, got ", weight_offset);
  NormArgs args = norm_args(x, eps);
  args.weight_offset = weight_offset;
  Tensor out = empty(x.shape(), x.dtype(), x.device());                  // (..., C)
  Tensor rstd = empty(rows_shape(x), acc_dtype(x.dtype()), x.device());  // (...)
  const Tensor xd = dense(x), wd = dense(weight);                        // on meta too: a real run's copies
  if (Kernels* kern = kernels_for(out)) kern->rms_norm_forward(current_stream(out.device()), out, rstd, xd, wd, args);
  if (autograd::needs_grad(x, weight)) {
    auto node = autograd::make_node<RmsNormBackward>({&x, &weight});
    node->has_weight = weight.defined();
    node->weight_offset = weight_offset;
    node->x = SavedTensor(x);
    node->rstd = SavedTensor(rstd);
    if (x.requires_grad()) node->weight = SavedTensor(weight);
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace tidal
