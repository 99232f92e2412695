#include "tidal/models/moe.h"

#include "tidal/autograd/checkpoint.h"
#include "tidal/autograd/checkpoint_without_output.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/memory_scope.h"
#include "tidal/ops/activation.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/index.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/softmax.h"
#include "tidal/ops/view.h"

namespace tidal::models {

SwiGluMlp::SwiGluMlp(int64_t hidden, int64_t ffn, const nn::Init& init) {
  gate_proj_ = &register_module("gate_proj", std::make_unique<nn::Linear>(hidden, ffn, false, init));
  up_proj_ = &register_module("up_proj", std::make_unique<nn::Linear>(hidden, ffn, false, init));
  down_proj_ = &register_module("down_proj", std::make_unique<nn::Linear>(ffn, hidden, false, init));
}

std::vector<Tensor> SwiGluMlp::project(const Tensor& x) const { return {gate_proj_->forward(x), up_proj_->forward(x)}; }

Tensor SwiGluMlp::finish(const std::vector<Tensor>& gate_up, bool recompute_act) const {
  ModuleScope scope(name());  // the SwiGLU's saved inputs
  return autograd::with_discarded_outputs(
      recompute_act, [](const std::vector<Tensor>& in) { return std::vector<Tensor>{swiglu(in[0], in[1])}; }, gate_up,
      [this](const std::vector<Tensor>& a) { return std::vector<Tensor>{down_proj_->forward(a[0])}; })[0];
}

Tensor SwiGluMlp::forward(const Tensor& x, bool recompute_act) const { return finish(project(x), recompute_act); }

SparseMoeBlock::SparseMoeBlock(const ModelConfig& c, const nn::Init& init)
    : experts_(c.num_experts), top_k_(c.num_experts_per_tok), norm_topk_(c.norm_topk_prob) {
  gate_ = &register_module("gate", std::make_unique<nn::Linear>(c.hidden_size, c.num_experts, false, init));
  experts_list_ = &register_module("experts", std::make_unique<nn::ModuleList<SwiGluMlp>>());
  for (int64_t e = 0; e < c.num_experts; ++e)
    experts_list_->add(std::make_unique<SwiGluMlp>(c.hidden_size, c.moe_intermediate_size, init));
}

namespace {

// Per-expert token counts; on meta tensors (no values) an even split, the planner's assumption.
std::vector<int64_t> expert_counts(const Tensor& choices, int64_t experts) {
  if (choices.is_meta()) {
    const int64_t n = choices.numel();
    std::vector<int64_t> c(size_t(experts), n / experts);
    for (int64_t e = 0; e < n % experts; ++e) ++c[size_t(e)];
    return c;
  }
  return bincount(choices, experts).to_vector<int64_t>();
}

}  // namespace

Tensor SparseMoeBlock::forward(const Tensor& x, RouterStats& stats, bool recompute_act) const {
  OpScope op("moe");
  ModuleScope scope(name());
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2), n = b * t;
  Tensor flat = x.reshape({n, c});                                  // (N, C)
  Tensor probs = softmax(gate_->forward(flat).to(DType::f32), -1);  // (N, E) router probabilities
  // Which experts each token goes to: recorded on the first run, replayed by a recompute.
  Tensor chosen = autograd::checkpoint_decision([&] {
    NoGradGuard no_grad;
    return topk(probs.detach(), top_k_, -1).indices;  // (N, k) i64
  });
  Tensor weights = gather(probs, 1, chosen);  // (N, k), differentiable
  if (norm_topk_) weights = div(weights, sum(weights, {-1}, true));
  weights = weights.to(x.dtype());

  // Group the N * k (token, expert) slots by expert: a stable sort keeps token order per expert.
  Tensor slot_expert = chosen.reshape({n * top_k_});  // (N*k)
  Tensor order = argsort(slot_expert);                // (N*k) slots sorted by expert
  Tensor slot_token = div(order, scalar_tensor(double(top_k_), DType::i64, x.device()));  // (N*k) token of each slot
  Tensor slot_weight = index_select(weights.reshape({n * top_k_}), 0, order);             // (N*k)
  const std::vector<int64_t> counts = expert_counts(slot_expert, experts_);
  std::vector<Tensor> outs;
  int64_t start = 0;
  for (int64_t e = 0; e < experts_; ++e) {
    const int64_t m = counts[size_t(e)];
    if (m == 0) continue;
    Tensor tokens = slot_token.narrow(0, start, m);                                                // (m)
    Tensor y = (*experts_list_)[size_t(e)].forward(index_select(flat, 0, tokens), recompute_act);  // (m, C)
    outs.push_back(mul(y, slot_weight.narrow(0, start, m).unsqueeze(1)));
    start += m;
  }
  Tensor combined = outs.size() == 1 ? outs[0] : cat(outs, 0);                            // (N*k, C) in slot order
  Tensor out = index_add(zeros({n, c}, x.dtype(), x.device()), 0, slot_token, combined);  // (N, C)

  stats.prob_sum = sum(probs, {0});  // (E)
  stats.tokens = n;
  {
    NoGradGuard no_grad;
    // counts[j * E + e] += 1 for each token whose j-th choice is e: one index_add on the device.
    Tensor cell = add(chosen, arange(0, top_k_ * experts_, experts_, DType::i64, x.device()));  // (N, k)
    Tensor counts_ke = index_add(zeros({top_k_ * experts_}, DType::f32, x.device()), 0, cell.reshape({n * top_k_}),
                                 ones({n * top_k_}, DType::f32, x.device()))
                           .reshape({top_k_, experts_});  // (k, E)
    stats.topk_counts = counts_ke;
  }
  return out.reshape({b, t, c});
}

Tensor load_balancing_loss(const std::vector<RouterStats>& layers, int64_t experts) {
  TIDAL_CHECK(!layers.empty(), "[moe] load-balancing loss over no sparse layers");
  Tensor probs = layers[0].prob_sum, counts = layers[0].topk_counts;
  int64_t n = layers[0].tokens;
  for (size_t i = 1; i < layers.size(); ++i) {
    probs = add(probs, layers[i].prob_sum);
    counts = add(counts, layers[i].topk_counts);
    n += layers[i].tokens;
  }
  const double inv = 1.0 / double(n);
  // (k, E) * (E) summed: E * sum tokens_per_expert * router_prob_per_expert
  return mul(sum(mul(counts, probs)), double(experts) * inv * inv);
}

}  // namespace tidal::models
