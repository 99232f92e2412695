#include "tidal/ops/rope.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "tidal/ops/common.h"
#include "tidal/ops/embedding.h"
#include "tidal/ops/view.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

Tensor rope_op(const Tensor& x, const Tensor& cos, const Tensor& sin, bool transpose);

// Note [RoPE tables are not saved tensors]: cos/sin are constants shared by every layer, so the node
// keeps plain references instead of SavedTensors: offload and recompute hooks would otherwise copy
// or track the same tables once per layer. Nothing else is saved (backward is linear in g).
struct RopeBackward : autograd::Node {
  Tensor cos, sin;  // (T, D) or (B, T, D)
  bool transpose = false;
  const char* name() const override { return "RopeBackward"; }
  autograd::TensorList apply(autograd::TensorList&& g) override { return {rope_op(g[0], cos, sin, !transpose)}; }
  void release_saved() override {
    cos = Tensor();
    sin = Tensor();
  }
};

// transpose = false: apply_rope; true: its adjoint (the backward), itself differentiable.
Tensor rope_op(const Tensor& x, const Tensor& cos, const Tensor& sin, bool transpose) {
  Tensor out = empty_like_layout(x, x.dtype());
  if (Kernels* kern = kernels_for(out)) kern->rope(current_stream(out.device()), out, x, cos, sin, transpose);
  if (autograd::needs_grad(x)) {
    auto node = autograd::make_node<RopeBackward>({&x});
    node->cos = cos.detach();
    node->sin = sin.detach();
    node->transpose = transpose;
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace

RopeTables rope_tables(int64_t seq_len, int64_t head_dim, double theta, DType dtype, Device device,
                       int64_t position_offset) {
  TIDAL_CHECK(head_dim > 0 && head_dim % 2 == 0, "[rope_tables] head_dim must be a positive even number, got ",
              head_dim);
  TIDAL_CHECK(theta > 0, "[rope_tables] theta must be positive, got ", theta);
  return rope_tables(seq_len, rope_frequencies(head_dim, theta), dtype, device, position_offset);
}

RopeTables rope_tables(int64_t seq_len, const RopeFrequencies& f, DType dtype, Device device, int64_t position_offset) {
  OpScope scope("rope_tables");
  const int64_t head_dim = 2 * int64_t(f.inv_freq.size());
  TIDAL_CHECK(seq_len >= 0, "[rope_tables] seq_len must be >= 0, got ", seq_len);
  TIDAL_CHECK(head_dim > 0, "[rope_tables] no frequencies given (head_dim 0)");
  TIDAL_CHECK(std::isfinite(f.attention_scaling) && f.attention_scaling > 0,
              "[rope_tables] attention_scaling must be a positive number, got ", f.attention_scaling);
  TIDAL_CHECK(position_offset >= 0, "[rope_tables] position_offset must be >= 0, got ", position_offset);
  TIDAL_CHECK(is_floating(dtype), "[rope_tables] tables must be floating (f32, bf16 or f64), got ", dtype);
  RopeTables t{empty({seq_len, head_dim}, dtype, device), empty({seq_len, head_dim}, dtype, device)};
  if (Kernels* kern = kernels_for(t.cos))
    kern->rope_tables(current_stream(t.cos.device()), t.cos, t.sin,
                      RopeTableArgs{f.inv_freq.data(), f.attention_scaling, position_offset});
  return t;
}

RopeTables rope_tables_at(const RopeTables& tables, const Tensor& positions) {
  OpScope scope("rope_tables_at");
  detail::check_dim("rope_tables_at", tables.cos, 2, "cos (P, D)");
  detail::check_dim("rope_tables_at", positions, 2, "positions (B, T)");
  TIDAL_CHECK(tables.sin.shape() == tables.cos.shape(), "[rope_tables_at] cos ", tables.cos.shape(), " and sin ",
              tables.sin.shape(), " differ");
  // embedding() checks each id against P and names the first one out of range.
  return {embedding(tables.cos.detach(), positions), embedding(tables.sin.detach(), positions)};
}

Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  OpScope scope("apply_rope");
  detail::check_dim("apply_rope", x, 4, "x (B, H, T, D)");
  detail::check_floating("apply_rope", x);
  TIDAL_CHECK(cos.dim() == 2 || cos.dim() == 3, "[apply_rope] cos must be (T, D) or (B, T, D), got ", cos.shape());
  detail::check_same("apply_rope", x, cos);
  detail::check_same("apply_rope", x, sin);
  TIDAL_CHECK(x.size(3) % 2 == 0, "[apply_rope] the head dim must be even: x ", x.shape());
  const Shape table = cos.dim() == 2 ? Shape{x.size(2), x.size(3)} : Shape{x.size(0), x.size(2), x.size(3)};
  TIDAL_CHECK(cos.shape() == table && sin.shape() == table, "[apply_rope] cos ", cos.shape(), " and sin ", sin.shape(),
              " must be ", table, cos.dim() == 2 ? " (T, D)" : " (B, T, D)", " for x (B, H, T, D) = ", x.shape());
  return rope_op(x, cos, sin, false);
}

}  // namespace tidal
