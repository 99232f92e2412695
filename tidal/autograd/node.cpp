#include "tidal/autograd/node.h"

#include <atomic>
#include <limits>

#include "tidal/autograd/grad_mode.h"
#include "tidal/memory_scope.h"

namespace tidal::autograd {
namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
thread_local bool t_grad_enabled = true;
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool on) { t_grad_enabled = on; }

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1)), layer_(memory_context().layer) {}

void Node::add_output(uint32_t nr, const Tensor& t) {
  if (outputs_.size() <= nr) {
    outputs_.resize(nr + 1);
    retained_.resize(nr + 1);
  }
  outputs_[nr] = {t.shape(), t.dtype(), t.device()};
}

AccumulateGrad::AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) {
  // Accumulation runs as soon as its gradient is ready: it frees the engine's buffer early.
  sequence_nr_ = std::numeric_limits<uint64_t>::max();
  add_output(0, Tensor(leaf));
}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  std::shared_ptr<TensorImpl> leaf = leaf_.lock();
  if (!leaf || !grads[0].defined()) return {};
  Tensor g = std::move(grads[0]);
  if (leaf->grad) {
    Tensor(leaf->grad).add_(g);
  } else {
    accumulate_first(*leaf, std::move(g));
  }
  for (const auto& [key, hook] : leaf->post_accumulate_grad_hooks) hook();
  return {};
}

void AccumulateGrad::accumulate_first(TensorImpl& leaf, Tensor&& g) {
  // Keep the incoming gradient itself when nothing else refers to its bytes; else copy it.
  const bool sole_owner = g.impl().use_count() == 1 && g.storage().use_count() == 1 && g.is_contiguous() &&
                          g.offset() == 0 && g.storage()->nbytes() == g.nbytes();
  if (sole_owner) {
    g.storage()->set_category(MemoryCategory::gradient);
  } else {
    MemoryScope scope(MemoryCategory::gradient);
    g = g.clone();
  }
  leaf.grad = g.impl();
}

Edge gradient_edge(const Tensor& t) {
  const std::shared_ptr<TensorImpl>& impl = t.impl();
  if (impl->grad_fn) return {impl->grad_fn, impl->output_nr};
  if (!impl->requires_grad) return {};
  std::shared_ptr<Node> acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(impl);
    impl->grad_accumulator = acc;
  }
  return {acc, 0};
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

std::vector<Edge> collect_next_edges(std::initializer_list<const Tensor*> inputs) {
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor* t : inputs) edges.push_back(t->defined() ? gradient_edge(*t) : Edge{});
  return edges;
}

std::vector<Edge> collect_next_edges(const std::vector<Tensor>& inputs) {
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor& t : inputs) edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
  return edges;
}

void set_history(const Tensor& out, const std::shared_ptr<Node>& node, uint32_t nr) {
  out.impl()->grad_fn = node;
  out.impl()->output_nr = nr;
  out.impl()->requires_grad = false;
  node->add_output(nr, out);
}

}  // namespace tidal::autograd
