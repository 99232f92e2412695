#include "tidal/ops/random.h"

#include <utility>

#include "tidal/base/checked_math.h"
#include "tidal/ops/common.h"
#include "tidal/ops/dropout_positions.h"
#include "tidal/ops/elementwise.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

Tensor generate(const char* op, const Shape& shape, DType dtype, Device device, Distribution dist) {
  OpScope scope(op);
  Tensor out = empty(shape, dtype, device);
  const RngState st = get_rng_state();
  const uint64_t start = reserve_random(uint64_t(out.numel()));
  if (Kernels* kern = kernels_for(out)) kern->random_fill(current_stream(out.device()), out, dist, st.seed, start);
  return out;
}

struct DropoutBackward : autograd::Node {
  autograd::SavedTensor mask;
  double scale = 1.0;
  const char* name() const override { return "DropoutBackward"; }
  autograd::TensorList apply(autograd::TensorList&& grads) override {
    Tensor m = mask.unpack(name());
    Tensor g = grads[0].contiguous();
    Tensor out = empty(g.shape(), g.dtype(), g.device());
    if (Kernels* kern = kernels_for(out)) kern->dropout_backward(current_stream(out.device()), out, g, m, scale);
    return {out};
  }
  void release_saved() override { mask.reset(); }
};

void set_dropout_history(const Tensor& out, const Tensor& x, const Tensor& mask, double scale) {
  if (!autograd::needs_grad(x)) return;
  auto node = autograd::make_node<DropoutBackward>({&x});
  node->mask = autograd::SavedTensor(mask);
  node->scale = scale;
  autograd::set_history(out, node);
}

void check_p(const char* op, double p) {
  TIDAL_CHECK(p >= 0.0 && p < 1.0, "[", op, "] probability must be in [0, 1), got ", p);
}

}  // namespace

Tensor rand(const Shape& shape, DType dtype, Device device) {
  return generate("rand", shape, dtype, device, Distribution::uniform);
}

Tensor randn(const Shape& shape, DType dtype, Device device) {
  return generate("randn", shape, dtype, device, Distribution::normal);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype, Device device) {
  OpScope scope("randint");
  TIDAL_CHECK(high > low, "[randint] empty range [", low, ", ", high, ")");
  Tensor out = empty(shape, dtype, device);
  const RngState st = get_rng_state();
  const uint64_t start = reserve_random(uint64_t(out.numel()));
  if (Kernels* kern = kernels_for(out))
    kern->randint_fill(current_stream(out.device()), out, low, high, st.seed, start);
  return out;
}

Tensor detail::dropout_at(const char* op, const Tensor& x, double p, const DropoutRowsArgs& a) {
  OpScope scope(op);
  detail::check_floating(op, x);
  Tensor mask = empty(x.shape(), DType::u8, x.device());
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  const double scale = 1.0 / (1.0 - p);
  const Tensor xc = x.detach().contiguous();  // on meta too: the copy a real run makes
  if (Kernels* kern = kernels_for(out))
    kern->dropout_rows_forward(current_stream(out.device()), a, out, mask, xc, p, scale);
  set_dropout_history(out, x, mask, scale);
  return out;
}

Tensor dropout(const Tensor& x, double p, bool training) {
  OpScope scope("dropout");
  detail::check_floating("dropout", x);
  check_p("dropout", p);
  if (!training || p == 0.0) return x;
  const RngState st = get_rng_state();
  const uint64_t start = reserve_random(uint64_t(x.numel()));
  Tensor mask = empty(x.shape(), DType::u8, x.device());
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  const double scale = 1.0 / (1.0 - p);
  const Tensor xc = x.detach().contiguous();  // on meta too: the copy a real run makes
  if (Kernels* kern = kernels_for(out))
    kern->dropout_forward(current_stream(out.device()), out, mask, xc, p, scale, st.seed, start);
  set_dropout_history(out, x, mask, scale);
  return out;
}

RandomRange reserve_random_range(uint64_t count) {
  const uint64_t seed = get_rng_state().seed;
  return {seed, reserve_random(count), count};
}

RowFrame reserve_row_frame(int64_t batch, int64_t global_rows, int64_t row_elems, std::vector<int64_t> rows) {
  const int64_t dims[] = {batch, global_rows, row_elems};
  const int64_t count = checked_product(dims, "[reserve_row_frame] batch * global_rows * row_elems");
  RowFrame f;
  f.rng = reserve_random_range(uint64_t(count));
  f.global_rows = global_rows;
  f.rows = std::move(rows);
  return f;
}

Tensor dropout_rows(const Tensor& x, double p, const RowFrame& frame, bool training) {
  const char* op = "dropout_rows";  // its OpScope is dropout_at's (the checks allocate nothing)
  detail::check_floating(op, x);
  check_p(op, p);
  TIDAL_CHECK(x.dim() >= 2, "[", op, "] x must be (B, T_local, C...), got ", x.shape());
  const int64_t b = x.size(0), t = x.size(1);
  int64_t c = 1;  // C: the product of the trailing dims (x exists, so no overflow)
  for (int i = 2; i < x.dim(); ++i) c *= x.size(i);
  TIDAL_CHECK(int64_t(frame.rows.size()) == t, "[", op, "] frame.rows has ", frame.rows.size(), " entries but x has ",
              t, " rows (dim 1 of ", x.shape(), ")");
  TIDAL_CHECK(frame.global_rows > 0, "[", op, "] frame.global_rows must be positive, got ", frame.global_rows);
  for (size_t i = 0; i < frame.rows.size(); ++i)
    TIDAL_CHECK(frame.rows[i] >= 0 && frame.rows[i] < frame.global_rows, "[", op, "] frame.rows[", i,
                "] = ", frame.rows[i], " is outside the global rows [0, ", frame.global_rows, ")");
  const int64_t whole[] = {b, frame.global_rows, c};
  const int64_t count = checked_product(whole, "[dropout_rows] B * global_rows * row elements");
  TIDAL_CHECK(frame.rng.count == uint64_t(count), "[", op, "] frame.rng holds ", frame.rng.count,
              " positions but the whole tensor (B ", b, ", T_g ", frame.global_rows, ", C ", c, ") needs ", count,
              ": reserve it with reserve_row_frame or reserve_random_range(B * T_g * C)");
  if (!training || p == 0.0) return x;
  DropoutRowsArgs a;
  a.outer = b;
  a.rows = t;
  a.inner = c;
  a.global_rows = frame.global_rows;
  a.global_inner = c;
  a.row_map = frame.rows.data();
  a.seed = frame.rng.seed;
  a.start = frame.rng.start;
  return detail::dropout_at(op, x, p, a);
}

}  // namespace tidal
