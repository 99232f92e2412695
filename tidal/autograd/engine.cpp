#include "tidal/autograd/engine.h"

#include <queue>
#include <unordered_map>

#include "tidal/autograd/grad_mode.h"
#include "tidal/autograd/node.h"
#include "tidal/memory_scope.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal::autograd {
namespace {

std::function<void(int)>& node_check() {
  static std::function<void(int)> check;
  return check;
}

struct ReadyOrder {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

// Adds `g` into a gradient slot, in place when the slot owns its bytes alone.
void accumulate(Tensor& slot, Tensor&& g) {
  if (!slot.defined()) {
    slot = std::move(g);
  } else if (slot.impl().use_count() == 1 && slot.storage().use_count() == 1 && slot.is_contiguous()) {
    slot.add_(g);
  } else {  // slot + g into new memory, as ops/ add() does (the engine sits below ops/)
    OpScope scope("add");
    Tensor sum = empty(slot.shape(), slot.dtype(), slot.device());
    if (Kernels* kern = kernels_for(sum)) kern->binary(current_stream(sum.device()), Binary::add, sum, slot, g, 1.0);
    slot = std::move(sum);
  }
}

void check_grad(const Node& node, size_t i, const Tensor& g) {
  const OutputMeta& m = node.output_meta(i);
  TIDAL_ASSERT(g.shape() == m.shape && g.dtype() == m.dtype, "gradient for output ", i, " of ", node.name(), " is ",
               g.shape(), " ", g.dtype(), " but the output was ", m.shape, " ", m.dtype);
}

// Per reachable node: how many edges of the graph point at it (its dependencies), and the gradients
// gathered for its outputs. One map for both: one lookup and one entry per node.
struct Pending {
  int deps = 0;
  TensorList grads;
};
using PendingMap = std::unordered_map<Node*, Pending>;
using ReadyQueue = std::priority_queue<Node*, std::vector<Node*>, ReadyOrder>;

// Puts each root's gradient into its node's slot and counts every reachable node's dependencies.
// Returns the roots' nodes, to be kept alive for the walk.
std::vector<std::shared_ptr<Node>> seed(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                                        PendingMap& pending) {
  std::vector<Node*> stack;
  std::vector<std::shared_ptr<Node>> keep_alive;
  for (size_t r = 0; r < roots.size(); ++r) {
    Edge e = gradient_edge(roots[r]);
    TIDAL_CHECK(e.fn != nullptr, "[backward] tensor ", r, " ", roots[r].shape(),
                " does not require grad and has no grad_fn: nothing to differentiate");
    TIDAL_CHECK(grads[r].shape() == roots[r].shape(), "[backward] gradient ", grads[r].shape(),
                " does not match its output ", roots[r].shape());
    keep_alive.push_back(e.fn);
    auto [it, inserted] = pending.try_emplace(e.fn.get());
    if (inserted) stack.push_back(e.fn.get());
    TensorList& buf = it->second.grads;
    buf.resize(e.fn->num_outputs());
    accumulate(buf[e.input_nr], grads[r].to(roots[r].dtype()));
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (!e.fn) continue;
      auto [it, inserted] = pending.try_emplace(e.fn.get());
      ++it->second.deps;
      if (inserted) stack.push_back(e.fn.get());
    }
  }
  return keep_alive;
}

// Runs one node's backward on the gradients gathered for it (none defined: it is skipped, its saved
// tensors still released) and hands its outputs on, queuing each next node whose last dependency it was.
void run_node(Node* node, PendingMap& pending, ReadyQueue& ready, bool retain_graph) {
  TensorList in = std::move(pending[node].grads);
  in.resize(node->num_outputs());
  bool any = false;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].defined()) continue;
    any = true;
    check_grad(*node, i, in[i]);
    if (auto t = node->retained()[i].lock()) Tensor(t).set_grad(in[i].clone());
  }
  TensorList out;
  if (any) {
    LayerScope layer(node->layer());
    OpScope op_scope(node->name(), profile::kBackward);  // memory and time of this node's backward
    for (const auto& hook : node->pre_hooks()) hook();
    if (node_check()) node_check()(node->layer());
    out = node->apply(std::move(in));
    TIDAL_ASSERT(out.size() == node->next_edges().size() || out.empty(), node->name(), " returned ", out.size(),
                 " gradients for ", node->next_edges().size(), " inputs");
  }
  if (!retain_graph) node->release_saved();
  const std::vector<Edge>& edges = node->next_edges();
  for (size_t i = 0; i < edges.size(); ++i) {
    Node* next = edges[i].fn.get();
    if (next == nullptr) continue;
    Pending& p = pending[next];
    if (i < out.size() && out[i].defined()) {
      p.grads.resize(next->num_outputs());
      accumulate(p.grads[edges[i].input_nr], std::move(out[i]));
    }
    if (--p.deps == 0) ready.push(next);
  }
}

}  // namespace

void set_backward_node_check(std::function<void(int layer)> check) { node_check() = std::move(check); }

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  TIDAL_CHECK(roots.size() == grads.size(), "[backward] got ", roots.size(), " outputs but ", grads.size(),
              " gradients");
  GradModeGuard no_grad(false);
  OpScope op("backward");
  PendingMap pending;
  const std::vector<std::shared_ptr<Node>> keep_alive = seed(roots, grads, pending);
  ReadyQueue ready;
  for (size_t r = 0; r < roots.size(); ++r) {
    Node* n = roots[r].impl()->grad_fn ? roots[r].impl()->grad_fn.get() : nullptr;
    if (n == nullptr) n = gradient_edge(roots[r]).fn.get();
    int& deps = pending[n].deps;
    if (deps == 0) {
      deps = -1;  // queued
      ready.push(n);
    }
  }
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    run_node(node, pending, ready, retain_graph);
  }
}

}  // namespace tidal::autograd

namespace tidal {

// Tensor's entry to the engine (tensor.h), defined beside it: the core's tensor.cpp does not include
// the engine.
void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  Tensor g = grad;
  if (!g.defined()) {
    TIDAL_CHECK(numel() == 1, "[backward] needs a gradient argument for a non-scalar output ", shape(),
                " (backward() without one only works on a single-element loss)");
    g = ones(shape(), dtype(), device());
  }
  autograd::backward({*this}, {g}, retain_graph);
}

}  // namespace tidal
