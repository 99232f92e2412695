#include "tidal/ops/grouped_linear.h"

#include <deque>

#include "tidal/ops/common.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;

// A view the device's matmul can read without a copy, else a contiguous copy (matmul.cpp's rule).
Tensor operand(const Tensor& t) {
  if (device_kernels(t.device()).matmul_operand_ok(t.size(-2), t.size(-1), t.stride(-2), t.stride(-1))) return t;
  return t.detach().contiguous();
}

// The products of one call: out = a @ b each, operands read without a copy where the device can (matmul's
// rule), all run by one Kernels::matmul_many. The deque keeps every tensor at its address.
class Products {
 public:
  void add(const Tensor& out, const Tensor& a, const Tensor& b) {
    keep_.push_back(out);
    keep_.push_back(operand(a));
    keep_.push_back(operand(b));
    tasks_.push_back({&keep_[keep_.size() - 3], &keep_[keep_.size() - 2], &keep_.back()});
  }
  void run(const Tensor& out) {
    if (tasks_.empty()) return;
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

}  // namespace

Tensor grouped_linear(const Tensor& x, std::span<const int64_t> counts, const std::vector<Tensor>& weights) {
  OpScope scope("grouped_linear");
  TIDAL_CHECK(x.dim() == 2, "[grouped_linear] x must be (rows, in), got ", x.shape());
  TIDAL_CHECK(counts.size() == weights.size(), "[grouped_linear] ", counts.size(), " group row counts for ",
              weights.size(), " weights");
  TIDAL_CHECK(!weights.empty(), "[grouped_linear] needs at least one group");
  const int64_t in = x.size(1), out_features = weights[0].size(0);
  int64_t total = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    detail::check_same("grouped_linear", x, weights[i]);
    TIDAL_CHECK(weights[i].dim() == 2 && weights[i].size(0) == out_features && weights[i].size(1) == in,
                "[grouped_linear] weight ", i, " is ", weights[i].shape(), ", expected (", out_features, ", ", in,
                ") as weight 0 and x ", x.shape());
    TIDAL_CHECK(counts[i] >= 0, "[grouped_linear] group ", i, " has ", counts[i], " rows");
    total += counts[i];
  }
  detail::check_floating("grouped_linear", x);
  TIDAL_CHECK(total == x.size(0), "[grouped_linear] the groups' ", total, " rows are not x's ", x.size(0));

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
  Tensor out = empty({x.size(0), out_features}, x.dtype(), x.device());  // (M, out)
  Products products;
  int64_t start = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const int64_t m = counts[i];
    if (m > 0)  // (m, out) = x_i (m, in) @ W_i^T
      products.add(out.detach().narrow(0, start, m), x.detach().narrow(0, start, m), weights[i].detach().t());
    start += m;
  }
  products.run(out);
  if (node) autograd::set_history(out, node);
  return out;
}

}  // namespace tidal
