#include "tidal/ops/elementwise.h"

#include "tidal/ops/common.h"
#include "tidal/ops/reduce.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;

const char* binary_name(Binary op) {
  switch (op) {
    case Binary::add: return "add";
    case Binary::sub: return "sub";
    case Binary::mul: return "mul";
    case Binary::div: return "div";
    case Binary::pow: return "pow";
    case Binary::maximum: return "maximum";
    case Binary::minimum: return "minimum";
  }
  return "binary";
}

struct BinaryBackward : Node {
  Binary op = Binary::add;
  double alpha = 1.0;
  Shape a_shape, b_shape;
  SavedTensor a, b, out;
  const char* name() const override {
    switch (op) {
      case Binary::add: return "AddBackward";
      case Binary::sub: return "SubBackward";
      case Binary::mul: return "MulBackward";
      case Binary::div: return "DivBackward";
      case Binary::pow: return "PowBackward";
      case Binary::maximum: return "MaximumBackward";
      case Binary::minimum: return "MinimumBackward";
    }
    return "BinaryBackward";
  }
  TensorList apply(TensorList&& grads) override {
    const Tensor& g = grads[0];
    Tensor ga, gb;
    const bool need_a = needs_input_grad(0), need_b = needs_input_grad(1);
    switch (op) {
      case Binary::add:
      case Binary::sub:
        if (need_a) ga = g;
        if (need_b) gb = op == Binary::add ? (alpha == 1.0 ? g : mul(g, alpha)) : mul(g, -alpha);
        break;
      case Binary::mul:
        if (need_a) ga = mul(g, b.unpack(name()));
        if (need_b) gb = mul(g, a.unpack(name()));
        break;
      case Binary::div: {
        Tensor bv = b.unpack(name());
        Tensor g_over_b = div(g, bv);
        if (need_b) gb = neg(mul(g_over_b, div(a.unpack(name()), bv)));
        if (need_a) ga = std::move(g_over_b);
        break;
      }
      case Binary::pow: {
        Tensor av = a.unpack(name()), bv = b.unpack(name());
        if (need_a) ga = mul(g, mul(bv, pow(av, sub(bv, 1.0))));
        if (need_b) gb = mul(g, mul(out.unpack(name()), log(av)));
        break;
      }
      case Binary::maximum:
      case Binary::minimum: {
        Tensor av = a.unpack(name()), bv = b.unpack(name());
        Tensor pick_a = op == Binary::maximum ? ge(av, bv) : le(av, bv);
        Tensor zero = zeros(Shape{}, g.dtype(), g.device());
        if (need_a) ga = where(pick_a, g, zero);
        if (need_b) gb = where(pick_a, zero, g);
        break;
      }
    }
    return {ga.defined() ? sum_to(ga, a_shape) : ga, gb.defined() ? sum_to(gb, b_shape) : gb};
  }
  void release_saved() override { autograd::reset_all(a, b, out); }
};

Tensor binary_op(Binary op, const Tensor& a, const Tensor& b, double alpha = 1.0) {
  const char* name = binary_name(op);
  OpScope scope(name);
  detail::check_same(name, a, b);
  TIDAL_CHECK(a.dtype() != DType::u8, "[", name, "] arithmetic on u8 masks is not supported; convert with .to()");
  Tensor out = empty(broadcast_shapes(a.shape(), b.shape(), name), a.dtype(), a.device());
  if (Kernels* kern = kernels_for(out)) kern->binary(current_stream(out.device()), op, out, a, b, alpha);
  if (autograd::needs_grad(a, b)) {
    auto node = autograd::make_node<BinaryBackward>({&a, &b});
    node->op = op;
    node->alpha = alpha;
    node->a_shape = a.shape();
    node->b_shape = b.shape();
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    switch (op) {
      case Binary::add:
      case Binary::sub: break;
      case Binary::mul:
        if (need_a) node->b = SavedTensor(b);
        if (need_b) node->a = SavedTensor(a);
        break;
      case Binary::div:
        node->b = SavedTensor(b);
        if (need_b) node->a = SavedTensor(a);
        break;
      case Binary::pow:
        node->a = SavedTensor(a);
        node->b = SavedTensor(b);
        if (need_b) node->out = SavedTensor(out);
        break;
      case Binary::maximum:
      case Binary::minimum:
        node->a = SavedTensor(a);
        node->b = SavedTensor(b);
        break;
    }
    autograd::set_history(out, node);
  }
  return out;
}

const char* unary_name(Unary op) {
  switch (op) {
    case Unary::neg: return "neg";
    case Unary::exp: return "exp";
    case Unary::log: return "log";
    case Unary::sqrt: return "sqrt";
    case Unary::rsqrt: return "rsqrt";
    case Unary::abs: return "abs";
    case Unary::sign: return "sign";
    case Unary::tanh: return "tanh";
    case Unary::sigmoid: return "sigmoid";
    case Unary::relu: return "relu";
    case Unary::square: return "square";
    case Unary::reciprocal: return "reciprocal";
    case Unary::sin: return "sin";
    case Unary::cos: return "cos";
    case Unary::add_scalar: return "add";
    case Unary::mul_scalar: return "mul";
    case Unary::rsub_scalar: return "rsub";
    case Unary::rdiv_scalar: return "rdiv";
    case Unary::pow_scalar: return "pow";
    case Unary::clamp_min: return "clamp_min";
    case Unary::clamp_max: return "clamp_max";
  }
  return "unary";
}

// What the backward of each unary op needs.
bool saves_input(Unary op) {
  switch (op) {
    case Unary::log:
    case Unary::abs:
    case Unary::square:
    case Unary::sin:
    case Unary::cos:
    case Unary::rdiv_scalar:
    case Unary::pow_scalar:
    case Unary::clamp_min:
    case Unary::clamp_max:
    case Unary::relu: return true;
    default: return false;
  }
}
bool saves_output(Unary op) {
  switch (op) {
    case Unary::exp:
    case Unary::sqrt:
    case Unary::rsqrt:
    case Unary::tanh:
    case Unary::sigmoid:
    case Unary::reciprocal: return true;
    default: return false;
  }
}

struct UnaryBackward : Node {
  Unary op = Unary::neg;
  double s = 0;
  SavedTensor in, out;
  const char* name() const override { return unary_name(op); }
  TensorList apply(TensorList&& grads) override {
    const Tensor& g = grads[0];
    Tensor x = saves_input(op) ? in.unpack(name()) : Tensor();
    Tensor y = saves_output(op) ? out.unpack(name()) : Tensor();
    switch (op) {
      case Unary::neg: return {neg(g)};
      case Unary::exp: return {mul(g, y)};
      case Unary::log: return {div(g, x)};
      case Unary::sqrt: return {div(g, mul(y, 2.0))};
      case Unary::rsqrt: return {mul(g, mul(pow(y, 3.0), -0.5))};
      case Unary::abs: return {mul(g, unary(Unary::sign, x))};
      case Unary::sign: return {zeros_like(g)};
      case Unary::tanh: return {mul(g, rsub(square(y), 1.0))};
      case Unary::sigmoid: return {mul(g, mul(y, rsub(y, 1.0)))};
      case Unary::relu: return {masked_fill(g, le_zero(x), 0.0)};
      case Unary::square: return {mul(g, mul(x, 2.0))};
      case Unary::reciprocal: return {neg(mul(g, square(y)))};
      case Unary::sin: return {mul(g, cos(x))};
      case Unary::cos: return {neg(mul(g, sin(x)))};
      case Unary::add_scalar: return {g};
      case Unary::mul_scalar: return {mul(g, s)};
      case Unary::rsub_scalar: return {neg(g)};
      case Unary::rdiv_scalar: return {mul(div(g, square(x)), -s)};
      case Unary::pow_scalar:
        if (s == 2.0) return {mul(g, mul(x, 2.0))};
        return {mul(g, mul(pow(x, s - 1.0), s))};
      case Unary::clamp_min: return {masked_fill(g, lt(x, s), 0.0)};
      case Unary::clamp_max: return {masked_fill(g, gt(x, s), 0.0)};
    }
    return {g};
  }
  void release_saved() override { autograd::reset_all(in, out); }

  static Tensor unary(Unary op, const Tensor& x) {
    Tensor o = empty(x.shape(), x.dtype(), x.device());
    if (Kernels* kern = kernels_for(o)) kern->unary(current_stream(o.device()), op, o, x, 0.0);
    return o;
  }
  static Tensor le_zero(const Tensor& x) {
    Tensor o = empty(x.shape(), DType::u8, x.device());
    if (Kernels* kern = kernels_for(o)) kern->compare_scalar(current_stream(o.device()), Compare::le, o, x, 0.0);
    return o;
  }
};

Tensor unary_op(Unary op, const Tensor& a, double s = 0.0) {
  const char* name = unary_name(op);
  OpScope scope(name);
  detail::check_defined(name, a, "the input");
  TIDAL_CHECK(a.dtype() != DType::u8, "[", name, "] arithmetic on u8 masks is not supported; convert with .to()");
  Tensor out = empty(a.shape(), a.dtype(), a.device());
  if (Kernels* kern = kernels_for(out)) kern->unary(current_stream(out.device()), op, out, a, s);
  if (autograd::needs_grad(a)) {
    auto node = autograd::make_node<UnaryBackward>({&a});
    node->op = op;
    node->s = s;
    if (saves_input(op)) node->in = SavedTensor(a);
    if (saves_output(op)) node->out = SavedTensor(out);
    autograd::set_history(out, node);
  }
  return out;
}

Tensor compare_op(Compare op, const Tensor& a, const Tensor& b) {
  OpScope scope("compare");
  detail::check_same("compare", a, b);
  Tensor out = empty(broadcast_shapes(a.shape(), b.shape(), "compare"), DType::u8, a.device());
  if (Kernels* kern = kernels_for(out)) kern->compare(current_stream(out.device()), op, out, a, b);
  return out;
}

Tensor compare_scalar_op(Compare op, const Tensor& a, double s) {
  OpScope scope("compare");
  detail::check_defined("compare", a, "the input");
  Tensor out = empty(a.shape(), DType::u8, a.device());
  if (Kernels* kern = kernels_for(out)) kern->compare_scalar(current_stream(out.device()), op, out, a, s);
  return out;
}

struct WhereBackward : Node {
  SavedTensor cond;
  Shape a_shape, b_shape;
  const char* name() const override { return "WhereBackward"; }
  TensorList apply(TensorList&& grads) override {
    const Tensor& g = grads[0];
    Tensor c = cond.unpack(name());
    Tensor ga, gb;
    if (needs_input_grad(0)) ga = sum_to(masked_fill(g, eq(c, 0.0), 0.0), a_shape);
    if (needs_input_grad(1)) gb = sum_to(masked_fill(g, c, 0.0), b_shape);
    return {ga, gb};
  }
  void release_saved() override { cond.reset(); }
};

struct MaskedFillBackward : Node {
  SavedTensor mask;
  const char* name() const override { return "MaskedFillBackward"; }
  TensorList apply(TensorList&& grads) override { return {masked_fill(grads[0], mask.unpack(name()), 0.0)}; }
  void release_saved() override { mask.reset(); }
};

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, double alpha) { return binary_op(Binary::add, a, b, alpha); }
Tensor sub(const Tensor& a, const Tensor& b, double alpha) { return binary_op(Binary::sub, a, b, alpha); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(Binary::mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op(Binary::div, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary_op(Binary::pow, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_op(Binary::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_op(Binary::minimum, a, b); }

Tensor add(const Tensor& a, double s) { return unary_op(Unary::add_scalar, a, s); }
Tensor sub(const Tensor& a, double s) { return unary_op(Unary::add_scalar, a, -s); }
Tensor rsub(const Tensor& a, double s) { return unary_op(Unary::rsub_scalar, a, s); }
Tensor mul(const Tensor& a, double s) { return unary_op(Unary::mul_scalar, a, s); }
Tensor div(const Tensor& a, double s) { return unary_op(Unary::mul_scalar, a, 1.0 / s); }
Tensor rdiv(const Tensor& a, double s) { return unary_op(Unary::rdiv_scalar, a, s); }
Tensor pow(const Tensor& a, double e) { return unary_op(Unary::pow_scalar, a, e); }
Tensor clamp(const Tensor& a, double lo, double hi) {
  TIDAL_CHECK(lo <= hi, "[clamp] lower bound ", lo, " is above the upper bound ", hi);
  return unary_op(Unary::clamp_max, unary_op(Unary::clamp_min, a, lo), hi);
}

Tensor neg(const Tensor& a) { return unary_op(Unary::neg, a); }
Tensor exp(const Tensor& a) { return unary_op(Unary::exp, a); }
Tensor log(const Tensor& a) { return unary_op(Unary::log, a); }
Tensor sqrt(const Tensor& a) { return unary_op(Unary::sqrt, a); }
Tensor rsqrt(const Tensor& a) { return unary_op(Unary::rsqrt, a); }
Tensor abs(const Tensor& a) { return unary_op(Unary::abs, a); }
Tensor tanh(const Tensor& a) { return unary_op(Unary::tanh, a); }
Tensor sigmoid(const Tensor& a) { return unary_op(Unary::sigmoid, a); }
Tensor relu(const Tensor& a) { return unary_op(Unary::relu, a); }
Tensor square(const Tensor& a) { return unary_op(Unary::square, a); }
Tensor sin(const Tensor& a) { return unary_op(Unary::sin, a); }
Tensor cos(const Tensor& a) { return unary_op(Unary::cos, a); }

Tensor eq(const Tensor& a, const Tensor& b) { return compare_op(Compare::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare_op(Compare::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare_op(Compare::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare_op(Compare::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare_op(Compare::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare_op(Compare::ge, a, b); }
Tensor eq(const Tensor& a, double s) { return compare_scalar_op(Compare::eq, a, s); }
Tensor ne(const Tensor& a, double s) { return compare_scalar_op(Compare::ne, a, s); }
Tensor lt(const Tensor& a, double s) { return compare_scalar_op(Compare::lt, a, s); }
Tensor gt(const Tensor& a, double s) { return compare_scalar_op(Compare::gt, a, s); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  OpScope scope("where");
  detail::check_same("where", a, b);
  detail::check_same_device("where", cond, a);
  TIDAL_CHECK(cond.dtype() == DType::u8, "[where] the condition must be a u8 mask, got ", cond.dtype());
  const Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = empty(shape, a.dtype(), a.device());
  if (Kernels* kern = kernels_for(out)) kern->where(current_stream(out.device()), out, cond, a, b);
  if (autograd::needs_grad(a, b)) {
    auto node = autograd::make_node<WhereBackward>({&a, &b});
    node->cond = SavedTensor(cond);
    node->a_shape = a.shape();
    node->b_shape = b.shape();
    autograd::set_history(out, node);
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  OpScope scope("masked_fill");
  detail::check_same_device("masked_fill", x, mask);
  TIDAL_CHECK(mask.dtype() == DType::u8, "[masked_fill] the mask must be u8, got ", mask.dtype());
  TIDAL_CHECK(broadcast_shapes(x.shape(), mask.shape(), "masked_fill") == x.shape(), "[masked_fill] mask ",
              mask.shape(), " does not broadcast to ", x.shape());
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (Kernels* kern = kernels_for(out)) kern->masked_fill(current_stream(out.device()), out, x, mask, value);
  if (autograd::needs_grad(x)) {
    auto node = autograd::make_node<MaskedFillBackward>({&x});
    node->mask = SavedTensor(mask);
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace tidal
