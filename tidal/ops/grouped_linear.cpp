#include "tidal/ops/grouped_linear.h"

#include <algorithm>
#include <deque>

#include "tidal/ops/common.h"
#include "tidal/ops/matmul.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;

// The products of one call: out = a @ b each, operands read without a copy where the device can (matmul's
// rule), all run by one Kernels::matmul_many. The deque keeps every tensor at its address.
class Products {
 public:
  void add(const Tensor& out, const Tensor& a, const Tensor& b) {
    keep_.push_back(out);
    keep_.push_back(matmul_operand(a));
    keep_.push_back(matmul_operand(b));
    tasks_.push_back({&keep_[keep_.size() - 3], &keep_[keep_.size() - 2], &keep_.back()});
  }
  void run(const Tensor& out) {
    if (tasks_.empty()) return;
    hold_planned_matmul_workspace(out);
    if (Kernels* kern = kernels_for(out)) kern->matmul_many(current_stream(out.device()), tasks_);
  }

 private:
  std::deque<Tensor> keep_;
  std::vector<MatmulTask> tasks_;
};

// Inputs: x, then the weights of the groups that have rows (in group order).
struct GroupedLinearBackward : Node {
  SavedTensor x;
  std::vector<SavedTensor> weights;
  std::vector<int64_t> rows;  // per input weight: its group's row count
  int64_t in = 0;             // x's features
  const char* name() const override { return "GroupedLinearBackward"; }
  TensorList apply(TensorList&& grads) override {
    const Tensor& g = grads[0];  // (M, out)
    const bool dx = needs_input_grad(0);
    bool dw = false;
    for (size_t i = 0; i < weights.size(); ++i) dw = dw || needs_input_grad(i + 1);
    const Tensor xv = dw ? x.unpack(name()) : Tensor();  // saved only for the weights' gradients
    std::vector<Tensor> wv(weights.size());
    for (size_t i = 0; i < weights.size(); ++i)
      if (dx) wv[i] = weights[i].unpack(name());
    TensorList out(weights.size() + 1);
    if (dx) out[0] = empty({g.size(0), in}, g.dtype(), g.device());  // (M, in)
    Products products;
    int64_t start = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
      const int64_t m = rows[i];
      const Tensor gi = g.narrow(0, start, m);                      // (m, out)
      if (dx) products.add(out[0].narrow(0, start, m), gi, wv[i]);  // (m, in) = g_i @ W_i
      if (needs_input_grad(i + 1)) {
        out[i + 1] = empty({g.size(1), in}, g.dtype(), g.device());  // (out, in)
        products.add(out[i + 1], gi.t(), xv.narrow(0, start, m));    // = g_i^T @ x_i
      }
      start += m;
    }
    products.run(g);
    return out;
  }
  void release_saved() override {
    x.reset();
    for (SavedTensor& w : weights) w.reset();
  }
};

// Inputs: x and the stacked weights (G, out, in).
struct GroupedLinearStackedBackward : Node {
  SavedTensor x, w;
  std::vector<int64_t> rows;  // per group
  int64_t in = 0;
  const char* name() const override { return "GroupedLinearStackedBackward"; }
  TensorList apply(TensorList&& grads) override {
    const Tensor& g = grads[0];  // (M, out)
    const bool dx = needs_input_grad(0), dw = needs_input_grad(1);
    const Tensor xv = dw ? x.unpack(name()) : Tensor(), wv = dx ? w.unpack(name()) : Tensor();
    TensorList out(2);
    if (dx) out[0] = empty({g.size(0), in}, g.dtype(), g.device());  // (M, in)
    if (dw) {                                                        // (G, out, in); a group of no rows gets zeros
      const Shape shape{int64_t(rows.size()), g.size(1), in};
      const bool empty_group = std::find(rows.begin(), rows.end(), 0) != rows.end();
      out[1] = empty_group ? zeros(shape, g.dtype(), g.device()) : empty(shape, g.dtype(), g.device());
    }
    Products products;
    int64_t start = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t m = rows[i];
      if (m == 0) continue;
      const Tensor gi = g.narrow(0, start, m);                                             // (m, out)
      if (dx) products.add(out[0].narrow(0, start, m), gi, wv.select(0, int64_t(i)));      // (m, in) = g_i @ W_i
      if (dw) products.add(out[1].select(0, int64_t(i)), gi.t(), xv.narrow(0, start, m));  // (out, in)
      start += m;
    }
    products.run(g);
    return out;
  }
  void release_saved() override { autograd::reset_all(x, w); }
};

// The checks both forms share: x (M, in) of a floating dtype, counts >= 0 summing to M.
void check_rows(const Tensor& x, std::span<const int64_t> counts) {
  TIDAL_CHECK(x.dim() == 2, "[grouped_linear] x must be (rows, in), got ", x.shape());
  detail::check_floating("grouped_linear", x);
  int64_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    TIDAL_CHECK(counts[i] >= 0, "[grouped_linear] group ", i, " has ", counts[i], " rows");
    total += counts[i];
  }
  TIDAL_CHECK(total == x.size(0), "[grouped_linear] the groups' ", total, " rows are not x's ", x.size(0));
}

// out (M, out) = each group's rows times its weight^T, weight_of(i) (out, in).
template <typename W>
Tensor grouped_products(const Tensor& x, std::span<const int64_t> counts, int64_t out_features, W weight_of) {
  Tensor out = empty({x.size(0), out_features}, x.dtype(), x.device());  // (M, out)
  Products products;
  int64_t start = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const int64_t m = counts[i];
    if (m > 0)  // (m, out) = x_i (m, in) @ W_i^T
      products.add(out.detach().narrow(0, start, m), x.detach().narrow(0, start, m), weight_of(i).t());
    start += m;
  }
  products.run(out);
  return out;
}

}  // namespace

Tensor grouped_linear_stacked(const Tensor& x, std::span<const int64_t> counts, const Tensor& weights) {
  OpScope scope("grouped_linear");
  check_rows(x, counts);
  detail::check_same("grouped_linear", x, weights);
  TIDAL_CHECK(weights.dim() == 3 && weights.size(0) == int64_t(counts.size()) && weights.size(2) == x.size(1),
              "[grouped_linear] stacked weights ", weights.shape(), " do not fit ", counts.size(), " groups of x ",
              x.shape(), ": expected (", counts.size(), ", out, ", x.size(1), ")");
  // Inputs saved before the products, as linear does (a checkpoint replay can stop here).
  std::shared_ptr<GroupedLinearStackedBackward> node;
  if (autograd::needs_grad(x, weights)) {
    node = autograd::make_node<GroupedLinearStackedBackward>({&x, &weights});
    node->rows.assign(counts.begin(), counts.end());
    node->in = x.size(1);
    if (weights.requires_grad()) node->x = SavedTensor(x);
    if (x.requires_grad()) node->w = SavedTensor(weights);
  }
  const Tensor w = weights.detach();
  Tensor out = grouped_products(x, counts, weights.size(1), [&](size_t i) { return w.select(0, int64_t(i)); });
  if (node) autograd::set_history(out, node);
  return out;
}

Tensor grouped_linear(const Tensor& x, std::span<const int64_t> counts, const std::vector<Tensor>& weights) {
  OpScope scope("grouped_linear");
  TIDAL_CHECK(counts.size() == weights.size(), "[grouped_linear] ", counts.size(), " group row counts for ",
              weights.size(), " weights");
  TIDAL_CHECK(!weights.empty(), "[grouped_linear] needs at least one group");
  check_rows(x, counts);
  const int64_t in = x.size(1), out_features = weights[0].size(0);
  for (size_t i = 0; i < weights.size(); ++i) {
    detail::check_same("grouped_linear", x, weights[i]);
    TIDAL_CHECK(weights[i].dim() == 2 && weights[i].size(0) == out_features && weights[i].size(1) == in,
                "[grouped_linear] weight ", i, " is ", weights[i].shape(), ", expected (", out_features, ", ", in,
                ") as weight 0 and x ", x.shape());
  }

  // The groups with rows: the node's inputs after x (a group of no rows computes nothing).
  std::vector<size_t> used;
  for (size_t i = 0; i < weights.size(); ++i)
    if (counts[i] > 0) used.push_back(i);
  // Inputs saved before the products, as linear does (a checkpoint replay can stop here).
  std::shared_ptr<GroupedLinearBackward> node;
  bool any_grad = autograd::needs_grad(x);
  for (size_t i : used) any_grad = any_grad || autograd::needs_grad(weights[i]);
  if (any_grad) {
    node = std::make_shared<GroupedLinearBackward>();
    node->in = in;
    std::vector<Tensor> inputs{x};
    bool weight_grad = false;
    for (size_t i : used) {
      inputs.push_back(weights[i]);
      node->rows.push_back(counts[i]);
      weight_grad = weight_grad || weights[i].requires_grad();
    }
    node->set_next_edges(autograd::collect_next_edges(inputs));
    if (weight_grad) node->x = SavedTensor(x);
    if (x.requires_grad())
      for (size_t i : used) node->weights.emplace_back(weights[i]);
    else
      node->weights.resize(used.size());
  }
  Tensor out = grouped_products(x, counts, out_features, [&](size_t i) { return weights[i].detach(); });
  if (node) autograd::set_history(out, node);
  return out;
}

}  // namespace tidal
