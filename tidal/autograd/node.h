#pragma once
// A node of the backward graph: the backward of one op call. `apply` maps the gradients of the op's
// outputs to the gradients of its inputs (one per next edge). Nodes hold what backward needs as
// SavedTensor members and drop them in release_saved() as soon as their backward ran.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tidal/tensor.h"

namespace tidal::autograd {

class Node;
using TensorList = std::vector<Tensor>;

struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;  // which output of `fn` this gradient belongs to
};

struct OutputMeta {
  Shape shape;
  DType dtype = DType::f32;
  Device device;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual const char* name() const = 0;
  // grads.size() == num_outputs(); an undefined entry means zero. Returns one entry per next edge
  // (undefined where that input needs no gradient).
  virtual TensorList apply(TensorList&& grads) = 0;
  virtual void release_saved() {}

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  void set_next_edges(std::vector<Edge> edges) { next_edges_ = std::move(edges); }
  // Whether input i (next edge i) needs a gradient.
  bool needs_input_grad(size_t i) const { return i < next_edges_.size() && next_edges_[i].fn != nullptr; }

  uint64_t sequence_nr() const { return sequence_nr_; }
  int layer() const { return layer_; }
  size_t num_outputs() const { return outputs_.size(); }
  const OutputMeta& output_meta(size_t i) const { return outputs_[i]; }
  // Registers output `nr` (shape/dtype/device), called by set_history.
  void add_output(uint32_t nr, const Tensor& t);
  // Non-leaf tensors whose gradient is kept (Tensor::retain_grad), per output.
  std::vector<std::weak_ptr<TensorImpl>>& retained() { return retained_; }
  // Functions the engine calls just before this node's backward (e.g. to bring back the bytes of a
  // tensor it saved that an output-discarding checkpoint freed).
  // `first`: before the hooks added so far (e.g. gathering a layer's parameters, which the others
  // may need).
  void add_pre_hook(std::function<void()> hook, bool first = false) {
    pre_hooks_.insert(first ? pre_hooks_.begin() : pre_hooks_.end(), std::move(hook));
  }
  const std::vector<std::function<void()>>& pre_hooks() const { return pre_hooks_; }

 protected:
  uint64_t sequence_nr_;

 private:
  std::vector<Edge> next_edges_;
  std::vector<OutputMeta> outputs_;
  std::vector<std::weak_ptr<TensorImpl>> retained_;
  std::vector<std::function<void()>> pre_hooks_;
  int layer_ = -1;
};

// The node that accumulates into a leaf's .grad.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf);
  const char* name() const override { return "AccumulateGrad"; }
  TensorList apply(TensorList&& grads) override;

 private:
  // The leaf's first gradient: `g` itself when nothing else refers to its bytes, else a copy.
  static void accumulate_first(TensorImpl& leaf, Tensor&& g);
  std::weak_ptr<TensorImpl> leaf_;
};

// The edge a gradient for `t` flows along (grad_fn for results, AccumulateGrad for leaves).
Edge gradient_edge(const Tensor& t);
// Whether grad mode is on and any of the tensors requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
inline bool needs_grad(const Tensor& a) { return needs_grad({&a}); }
inline bool needs_grad(const Tensor& a, const Tensor& b) { return needs_grad({&a, &b}); }
inline bool needs_grad(const Tensor& a, const Tensor& b, const Tensor& c) { return needs_grad({&a, &b, &c}); }
// Edges for the inputs of an op (an empty edge for inputs that need no gradient).
std::vector<Edge> collect_next_edges(std::initializer_list<const Tensor*> inputs);
std::vector<Edge> collect_next_edges(const std::vector<Tensor>& inputs);
// Makes `out` the output `nr` of `node`.
void set_history(const Tensor& out, const std::shared_ptr<Node>& node, uint32_t nr = 0);

// Creates node N with edges to `inputs`.
template <typename N, typename... Args>
std::shared_ptr<N> make_node(std::initializer_list<const Tensor*> inputs, Args&&... args) {
  auto node = std::make_shared<N>(std::forward<Args>(args)...);
  node->set_next_edges(collect_next_edges(inputs));
  return node;
}

// Resets every SavedTensor (or anything with reset()) passed.
template <typename... S>
void reset_all(S&... saved) {
  (saved.reset(), ...);
}

}  // namespace tidal::autograd
