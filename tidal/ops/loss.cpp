#include "tidal/ops/loss.h"

#include "tidal/ops/common.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;

// Elements from one row of t (..., V) to the next when its rows have a unit inner stride and one
// common row stride (contiguous tensors, but also e.g. a narrow along the last dim); 0 otherwise.
int64_t uniform_row_stride(const Tensor& t) {
  if (t.size(-1) > 1 && t.stride(-1) != 1) return 0;
  int64_t row = 0, expected = 0;
  for (int d = t.dim() - 2; d >= 0; --d) {
    if (t.shape()[d] == 1) continue;
    if (row == 0) {
      row = t.strides()[d];
      expected = row * t.shape()[d];
    } else if (t.strides()[d] == expected) {
      expected *= t.shape()[d];
    } else {
      return 0;
    }
  }
  return row == 0 ? t.size(-1) : row;
}

// The logits as the kernels read them: in place when the layout allows, else a contiguous copy.
struct LogitRows {
  Tensor logits;
  int64_t row_stride = 0;
};
LogitRows logit_rows(const Tensor& logits) {
  const int64_t stride = uniform_row_stride(logits);
  if (stride > 0) return {logits.detach(), stride};
  return {logits.detach().contiguous(), logits.size(-1)};
}

Shape rows_shape(const Tensor& logits) {
  Shape s = logits.shape();
  s.erase(s.size() - 1);
  return s;
}

std::string index_in(const Shape& shape, int64_t flat) {
  Shape idx = shape;
  for (int d = shape.size() - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx.str();
}

[[noreturn]] void throw_bad_target(const Tensor& logits, const Tensor& targets, int64_t pos, int64_t ignore_index) {
  const int64_t value = targets.reshape(Shape{-1}).narrow(0, pos, 1).to(DType::i64).item<int64_t>();
  const int64_t V = logits.size(-1);
  detail::throw_error(detail::str_cat("[cross_entropy] target ", value, " at position ", pos, " (index ",
                                      index_in(targets.shape(), pos), " of targets ", targets.shape(),
                                      ") is out of range for ", V, " classes (logits ", logits.shape(),
                                      "): targets must be in [0, ", V, ") or equal ignore_index ", ignore_index));
}

struct CrossEntropyBackward : Node {
  SavedTensor logits, lse, targets;
  CrossEntropyArgs args;
  Reduction reduction = Reduction::mean;
  int64_t count = 0;  // non-ignored rows (mean)
  const char* name() const override { return "CrossEntropyBackward"; }
  TensorList apply(TensorList&& grads) override {
    const Tensor& g = grads[0];
    Tensor lv = logits.unpack(name());
    Tensor dlogits = empty(lv.shape(), lv.dtype(), lv.device());  // (..., V): the only big allocation
    Kernels* kern = kernels_for(dlogits);
    if (kern == nullptr) return {dlogits};
    Tensor row_grad;  // (rows) for Reduction::none
    double scale = 1.0;
    if (reduction == Reduction::none) {
      row_grad = g.contiguous();
    } else {
      scale = detail::scalar_value(*kern, g);
      if (reduction == Reduction::mean) scale /= double(count);  // count 0: every row is ignored anyway
    }
    LogitRows rows = logit_rows(lv);
    CrossEntropyArgs a = args;
    a.row_stride = rows.row_stride;
    kern->cross_entropy_backward(current_stream(dlogits.device()), dlogits, rows.logits, lse.unpack(name()),
                                 targets.unpack(name()), row_grad, scale, a);
    return {dlogits};
  }
  void release_saved() override { autograd::reset_all(logits, lse, targets); }
};

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Reduction reduction) {
  OpScope scope("cross_entropy");
  detail::check_floating("cross_entropy", logits);
  detail::check_same_device("cross_entropy", logits, targets);
  TIDAL_CHECK(targets.dtype() == DType::i64 || targets.dtype() == DType::i32,
              "[cross_entropy] targets must be class indices (i64 or i32), got ", targets.dtype(), " ",
              targets.shape());
  TIDAL_CHECK(logits.dim() >= 1 && logits.size(-1) > 0, "[cross_entropy] logits must be (..., V) with V > 0, got ",
              logits.shape());
  const Shape rows = rows_shape(logits);
  TIDAL_CHECK(targets.shape() == rows, "[cross_entropy] targets ", targets.shape(),
              " must have the leading shape of logits ", logits.shape(), ", i.e. ", rows);
  CrossEntropyArgs args;
  args.rows = rows.numel();
  args.vocab = logits.size(-1);
  args.ignore_index = ignore_index;
  const DType acc = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor tc = targets.contiguous();                     // (...) small
  Tensor lse = empty(rows, acc, logits.device());       // (...) per-row log-sum-exp, saved
  Tensor row_loss = empty(rows, acc, logits.device());  // (...)
  // A reduced loss is the accumulator's dtype: bf16 logits give an f32 loss (mixed precision's fp32 loss).
  Tensor out = reduction == Reduction::none ? Tensor() : empty(Shape{}, acc, logits.device());
  int64_t count = 0;
  if (Kernels* kern = kernels_for(logits)) {
    const int64_t bad = kern->find_bad_target(current_stream(logits.device()), tc, args);
    if (bad >= 0) throw_bad_target(logits, tc, bad, ignore_index);
    LogitRows lr = logit_rows(logits);
    args.row_stride = lr.row_stride;
    const CrossEntropySums sums =
        kern->cross_entropy_forward(current_stream(logits.device()), row_loss, lse, lr.logits, tc, args);
    count = sums.count;
    if (reduction == Reduction::mean) out.fill_(sums.loss / double(count));  // 0 / 0 = NaN when all ignored
    if (reduction == Reduction::sum) out.fill_(sums.loss);
  }
  if (reduction == Reduction::none) out = row_loss.to(logits.dtype());  // no copy unless bf16
  if (autograd::needs_grad(logits)) {
    auto node = autograd::make_node<CrossEntropyBackward>({&logits});
    node->logits = SavedTensor(logits);
    node->lse = SavedTensor(lse);
    node->targets = SavedTensor(tc);
    node->args = args;
    node->reduction = reduction;
    node->count = count;
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace tidal
