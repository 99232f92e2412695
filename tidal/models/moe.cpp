#include "tidal/models/moe.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <utility>

#include "tidal/autograd/checkpoint.h"
#include "tidal/autograd/checkpoint_without_output.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/dist/collectives.h"
#include "tidal/memory_scope.h"
#include "tidal/models/causal_lm.h"
#include "tidal/models/expert_dispatch.h"
#include "tidal/ops/activation.h"
#include "tidal/ops/all_to_all.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/grouped_linear.h"
#include "tidal/ops/index.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/softmax.h"
#include "tidal/ops/view.h"
#include "tidal/rng.h"

namespace tidal::models {

std::vector<Tensor> clamp_gate_up(const Tensor& gate, const Tensor& up, double limit) {
  if (limit <= 0) return {gate, up};
  return {clamp(gate, -std::numeric_limits<double>::infinity(), limit), clamp(up, -limit, limit)};
}

SwiGluMlp::SwiGluMlp(int64_t hidden, int64_t ffn, const nn::Init& init, GluActivation act, double limit)
    : act_(act), limit_(limit) {
  gate_proj_ = &register_module("gate_proj", std::make_unique<nn::Linear>(hidden, ffn, false, init));
  up_proj_ = &register_module("up_proj", std::make_unique<nn::Linear>(hidden, ffn, false, init));
  down_proj_ = &register_module("down_proj", std::make_unique<nn::Linear>(ffn, hidden, false, init));
}

std::vector<Tensor> SwiGluMlp::project(const Tensor& x) const {
  return clamp_gate_up(gate_proj_->forward(x), up_proj_->forward(x), limit_);
}

Tensor SwiGluMlp::finish(const std::vector<Tensor>& gate_up, bool recompute_act) const {
  ModuleScope scope(name());  // the SwiGLU's saved inputs
  return autograd::with_discarded_outputs(
      recompute_act,
      [act = act_](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{act == GluActivation::silu ? swiglu(in[0], in[1]) : geglu(in[0], in[1])};
      },
      gate_up, [this](const std::vector<Tensor>& a) { return std::vector<Tensor>{down_proj_->forward(a[0])}; })[0];
}

Tensor SwiGluMlp::forward(const Tensor& x, bool recompute_act) const { return finish(project(x), recompute_act); }

Tensor run_experts(const std::vector<SwiGluMlp*>& experts, const Tensor& rows, const std::vector<int64_t>& counts,
                   bool recompute_act, const char* module) {
  TIDAL_ASSERT(experts.size() == counts.size() && !experts.empty(), "run_experts: ", counts.size(), " counts for ",
               experts.size(), " experts");
  const bool lora = std::any_of(experts.begin(), experts.end(), [](const SwiGluMlp* e) {
    return e->gate_proj().has_lora() || e->up_proj().has_lora() || e->down_proj().has_lora();
  });
  if (lora) {  // each expert's forward: its adapters run with it
    std::vector<Tensor> outs;
    int64_t start = 0;
    for (size_t e = 0; e < experts.size(); ++e) {
      if (counts[e] > 0) outs.push_back(experts[e]->forward(rows.narrow(0, start, counts[e]), recompute_act));
      start += counts[e];
    }
    return outs.empty()       ? zeros({0, rows.size(1)}, rows.dtype(), rows.device())
           : outs.size() == 1 ? outs[0]
                              : cat(outs, 0);
  }
  std::vector<Tensor> gate_w, up_w, down_w;
  for (const SwiGluMlp* e : experts) {
    gate_w.push_back(e->gate_proj().weight());
    up_w.push_back(e->up_proj().weight());
    down_w.push_back(e->down_proj().weight());
  }
  ModuleScope scope(module);
  const std::vector<Tensor> gate_up =
      clamp_gate_up(grouped_linear(rows, counts, gate_w), grouped_linear(rows, counts, up_w), experts[0]->limit());
  return autograd::with_discarded_outputs(
      recompute_act,
      [act = experts[0]->activation()](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{act == GluActivation::silu ? swiglu(in[0], in[1]) : geglu(in[0], in[1])};
      },
      gate_up,
      [&](const std::vector<Tensor>& a) { return std::vector<Tensor>{grouped_linear(a[0], counts, down_w)}; })[0];
}

Router::Router(const ModelConfig& c, const nn::Init& init)
    : nn::Linear(c.hidden_size, c.num_experts, false, init),
      experts_(c.num_experts),
      top_k_(c.num_experts_per_tok),
      groups_(c.n_group),
      top_groups_(c.topk_group),
      f32_logits_(c.router_score == ModelConfig::RouterScore::sigmoid) {
  refuse_lora();  // its logits read the weight itself
  if (c.router_expert_bias) {
    MemoryScope scope(MemoryCategory::parameter);  // buffers of the model: accounted with its parameters
    bias_ = register_buffer("e_score_correction_bias", zeros({c.num_experts}, DType::f32, init.device));
    rate_ = c.moe_router_bias_update_rate;
    if (rate_ > 0) load_ = register_buffer("tokens_per_expert", zeros({c.num_experts}, DType::f32, init.device), false);
  }
}

void Router::add_load(const Tensor& counts) const {
  NoGradGuard no_grad;
  Tensor(load_).add_(counts);
}

void update_bias_from_load(const Tensor& bias_t, const Tensor& load_t, double rate_d, dist::Communicator& group) {
  if (load_t.is_meta()) return;  // a dry run's routers have no counts
  NoGradGuard no_grad;
  Tensor total = load_t.clone();  // (E)
  dist::all_reduce_sum(group, total);
  const std::vector<float> load = total.to(Device::cpu()).to_vector<float>();
  const std::vector<float> before = bias_t.to(Device::cpu()).to_vector<float>();
  std::vector<double> bias(before.size());
  double sum = 0;
  for (float x : load) sum += x;
  const float mean = float(sum / double(load.size())), rate = float(rate_d);
  for (size_t e = 0; e < bias.size(); ++e) {
    const float offset = mean - load[e];
    bias[e] = double(before[e] + (offset > 0 ? rate : offset < 0 ? -rate : 0.0f));  // in f32, as Megatron
  }
  Tensor(bias_t).copy_(from_vector(bias, Shape{int64_t(bias.size())}, DType::f32, bias_t.device()));
  Tensor(load_t).zero_();
}

void Router::update_expert_bias(dist::Communicator& group) {
  if (!tracks_load()) return;
  update_bias_from_load(bias_, load_, rate_, group);
}

void update_expert_biases(const CausalLM& model, dist::Communicator& group) { model.update_expert_biases(group); }

Tensor Router::logits(const Tensor& x) const {
  if (!f32_logits_ || x.dtype() == DType::f32) return forward(x).to(DType::f32);
  ModuleScope scope(name());
  return linear(x.to(DType::f32), weight().to(DType::f32));  // saves both f32 copies for its backward
}

Tensor Router::choose(const Tensor& scores) const {
  NoGradGuard no_grad;
  if (!bias_.defined()) return topk(scores, top_k_, -1).indices;  // (N, k)
  const int64_t n = scores.size(0), per_group = experts_ / groups_;
  Tensor s = add(scores, bias_);  // (N, E) what the choice ranks
  if (top_groups_ < groups_) {
    // A group's score: its two best experts' values summed; the experts of the other groups are out.
    Tensor group_score = sum(topk(s.reshape({n, groups_, per_group}), 2, -1).values, {-1});  // (N, G)
    Tensor kept = topk(group_score, top_groups_, -1).indices;                                // (N, topk_group)
    Tensor on = scatter_add(zeros({n, groups_}, DType::f32, s.device()), 1, kept,
                            ones({n, top_groups_}, DType::f32, s.device()));                       // (N, G) 1: kept
    Tensor out = eq(on.unsqueeze(2).expand({n, groups_, per_group}).reshape({n, experts_}), 0.0);  // (N, E)
    s = masked_fill(s, out, -std::numeric_limits<double>::infinity());
  }
  return topk(s, top_k_, -1).indices;  // (N, k)
}

SparseMoeBlock::SparseMoeBlock(const ModelConfig& c, const nn::Init& init,
                               std::shared_ptr<dist::Communicator> expert_group)
    : experts_(c.num_experts),
      top_k_(c.num_experts_per_tok),
      norm_topk_(c.norm_topk_prob),
      capacity_(c),
      group_(std::move(expert_group)) {
  gate_ = &register_module("gate", std::make_unique<Router>(c, init));
  auto& experts = register_module("experts", std::make_unique<nn::ModuleDict>());
  experts_module_ = &experts;
  const int64_t ranks = group_ ? group_->size() : 1, rank = group_ ? group_->rank() : 0;
  TIDAL_CHECK(c.num_experts % ranks == 0, "[moe] ", ranks, " expert-parallel ranks do not divide the model's ",
              c.num_experts, " experts (num_experts)");
  const int64_t local = c.num_experts / ranks;
  for (int64_t e = 0; e < c.num_experts; ++e) {
    if (e / local == rank) {
      local_.push_back(
          experts.add(std::to_string(e), std::make_unique<SwiGluMlp>(c.hidden_size, c.moe_intermediate_size, init)));
    } else if (!init.device.is_meta()) {
      // Another rank's expert: its three weights' draws are skipped, so each expert has the values
      // it has in the whole model (the generator is counter-based: a draw depends on its position).
      for (int w = 0; w < 3; ++w) reserve_random(uint64_t(c.hidden_size * c.moe_intermediate_size));
    }
  }
  if (c.n_shared_experts > 0)  // DeepSeek-V3: one MLP as wide as n_shared_experts experts
    shared_ = &register_module(
        "shared_experts",
        std::make_unique<SwiGluMlp>(c.hidden_size, c.n_shared_experts * c.moe_intermediate_size, init));
}

bool is_expert_parameter(const std::string& name) {
  return name.starts_with("experts.") || name.find(".experts.") != std::string::npos;
}

std::string expert_of(const std::string& name) {
  const std::string key = "experts.";
  size_t at = name.starts_with(key) ? 0 : name.find(".experts.");
  if (at == std::string::npos) return "";
  at += name.starts_with(key) ? key.size() : key.size() + 1;
  size_t end = at;
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  return end == at ? "" : name.substr(0, end);
}

std::function<bool(const std::string&)> held_here(const std::vector<std::string>& names) {
  auto mine = std::make_shared<std::set<std::string>>();
  for (const std::string& n : names)
    if (const std::string e = expert_of(n); !e.empty()) mine->insert(e);
  return [mine](const std::string& name) {
    const std::string e = expert_of(name);
    return e.empty() || mine->count(e) > 0;
  };
}

int64_t expert_capacity(int64_t tokens, int64_t top_k, int64_t experts, double factor) {
  return int64_t(std::ceil(double(tokens * top_k) / double(experts) * factor));
}

namespace {
std::atomic<int64_t> g_routed{0}, g_dropped{0};  // take_dropped_slots
}  // namespace

DroppedSlots take_dropped_slots() { return {g_routed.exchange(0), g_dropped.exchange(0)}; }

Tensor capacity_routing(const Tensor& chosen, const Tensor& weights, int64_t batch, int64_t experts,
                        const ModelConfig& c, int64_t& dropped) {
  const int64_t n = chosen.size(0), k = chosen.size(1), seq = n / batch;
  const int64_t cap = expert_capacity(n, k, experts, c.moe_expert_capacity_factor);
  const bool pad = c.moe_pad_expert_input_to_capacity;
  dropped = 0;
  if (chosen.is_meta()) {
    int64_t rows = 0;
    for (int64_t e = 0; e < experts; ++e) {
      const int64_t even = n * k / experts + (e < n * k % experts ? 1 : 0);
      rows += pad ? std::min(cap, n) : std::min(cap, even);
    }
    return empty({3, rows}, DType::i64, chosen.device());
  }
  const std::vector<int64_t> expert = chosen.to_vector<int64_t>();
  const std::vector<float> weight = weights.to(DType::f32).to_vector<float>();
  auto position = [&](int64_t token) { return token % seq * batch + token / seq; };
  std::vector<std::vector<int64_t>> slots(static_cast<size_t>(experts));  // per expert, in token order
  for (int64_t i = 0; i < n * k; ++i) slots[size_t(expert[size_t(i)])].push_back(i);
  std::vector<int64_t> token, slot, owner;
  for (int64_t e = 0; e < experts; ++e) {
    std::vector<int64_t>& mine = slots[size_t(e)];
    if (int64_t(mine.size()) > cap) {
      std::vector<int64_t> ranked = mine;
      std::stable_sort(ranked.begin(), ranked.end(), [&](int64_t a, int64_t b) {
        if (c.moe_token_drop_policy == ModelConfig::DropPolicy::probs && weight[size_t(a)] != weight[size_t(b)])
          return weight[size_t(a)] > weight[size_t(b)];
        return position(a / k) < position(b / k);
      });
      ranked.resize(size_t(cap));
      std::sort(ranked.begin(), ranked.end());  // back in token order
      dropped += int64_t(mine.size()) - cap;
      mine = std::move(ranked);
    }
    for (int64_t i : mine) {
      token.push_back(i / k);
      slot.push_back(i);
      owner.push_back(e);
    }
    if (!pad) continue;
    // Padding: the earliest positions whose token did not choose e, weight zero.
    std::vector<bool> taken(size_t(n), false);
    for (int64_t i = 0; i < n * k; ++i)
      if (expert[size_t(i)] == e) taken[size_t(i / k)] = true;
    int64_t rows = int64_t(mine.size());
    for (int64_t p = 0; p < n && rows < std::min(cap, n); ++p) {
      const int64_t t = p % batch * seq + p / batch;  // the token at position p
      if (taken[size_t(t)]) continue;
      token.push_back(t);
      slot.push_back(n * k);
      owner.push_back(e);
      ++rows;
    }
  }
  std::vector<int64_t> all = token;
  all.insert(all.end(), slot.begin(), slot.end());
  all.insert(all.end(), owner.begin(), owner.end());
  return from_vector_i64(all, Shape{3, int64_t(token.size())}, chosen.device());
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
  Tensor flat = x.reshape({n, c});      // (N, C)
  Tensor logits = gate_->logits(flat);  // (N, E) f32
  const bool sigmoid_scores = capacity_.router_score == ModelConfig::RouterScore::sigmoid;
  Tensor probs = sigmoid_scores ? sigmoid(logits) : softmax(logits, -1);  // (N, E) router scores
  // Which experts each token goes to: recorded on the first run, replayed by a recompute.
  Tensor chosen = autograd::checkpoint_decision([&] { return gate_->choose(probs.detach()); });  // (N, k) i64
  Tensor weights = gather(probs, 1, chosen);  // (N, k), differentiable
  if (norm_topk_) {
    Tensor total = sum(weights, {-1}, true);  // (N, 1); DeepSeek-V3 adds 1e-20 against a zero sum
    weights = div(weights, sigmoid_scores ? add(total, 1e-20) : total);
  }
  if (capacity_.routed_scaling_factor != 1.0) weights = mul(weights, capacity_.routed_scaling_factor);
  Tensor routed = weights;  // f32: what the probs drop policy ranks
  weights = weights.to(x.dtype());

  Tensor slot_token, slot_weight;  // (M) the rows the experts run, grouped by expert
  std::vector<int64_t> counts;     // rows per expert
  if (capacity_.moe_expert_capacity_factor > 0) {
    // Which slots each expert keeps: a decision, replayed exactly by a recompute.
    Tensor rows = autograd::checkpoint_decision([&] {
      NoGradGuard no_grad;
      int64_t dropped = 0;
      Tensor r = capacity_routing(chosen, routed.detach(), b, experts_, capacity_, dropped);
      if (!chosen.is_meta()) g_routed += n * top_k_;
      g_dropped += dropped;
      return r;
    });
    const int64_t m = rows.size(1);
    slot_token = rows.narrow(0, 0, 1).reshape({m});
    // A padding row's slot is N*k: the zero after the weights.
    Tensor padded = cat({weights.reshape({n * top_k_}), zeros({1}, weights.dtype(), x.device())}, 0);
    slot_weight = index_select(padded, 0, rows.narrow(0, 1, 1).reshape({m}));
    counts = expert_counts(rows.narrow(0, 2, 1).reshape({m}), experts_);
  } else {
    // Group the N * k (token, expert) slots by expert: a stable sort keeps token order per expert.
    Tensor slot_expert = chosen.reshape({n * top_k_});                               // (N*k)
    Tensor order = argsort(slot_expert);                                             // (N*k) slots sorted by expert
    slot_token = div(order, scalar_tensor(double(top_k_), DType::i64, x.device()));  // (N*k) token of each slot
    slot_weight = index_select(weights.reshape({n * top_k_}), 0, order);             // (N*k)
    counts = expert_counts(slot_expert, experts_);
  }
  Tensor combined;  // (M, C) in row order
  if (group_) {
    combined = run_on_owners(flat, slot_token, slot_weight, counts, recompute_act);
  } else {
    Tensor rows = index_select(flat, 0, slot_token);  // (M, C) grouped by expert
    combined = mul(run_experts(local_, rows, counts, recompute_act, experts_module_->name()), slot_weight.unsqueeze(1));
  }
  Tensor out = index_add(zeros({n, c}, x.dtype(), x.device()), 0, slot_token, combined);  // (N, C)
  if (shared_ != nullptr) out = add(out, shared_->forward(flat, recompute_act));          // every token, unweighted

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
  // The expert-bias update's loads: training forwards only, not a recompute's replay of this one.
  if (gate_->tracks_load() && is_training() && autograd::grad_enabled() && !autograd::in_checkpoint_replay())
    gate_->add_load(sum(stats.topk_counts, {0}));
  return out.reshape({b, t, c});
}

Tensor SparseMoeBlock::run_on_owners(const Tensor& flat, const Tensor& slot_token, const Tensor& slot_weight,
                                     const std::vector<int64_t>& counts, bool recompute_act) const {
  const RunLocalExperts run = [&](const Tensor& grouped, const std::vector<int64_t>& mine) {
    return run_experts(local_, grouped, mine, recompute_act, experts_module_->name());
  };
  Tensor returned = models::run_on_owners(*group_, index_select(flat, 0, slot_token), counts, run);  // (N*k, C)
  return mul(returned, slot_weight.unsqueeze(1));
}

Tensor load_balancing_loss(const std::vector<RouterStats>& layers, int64_t experts, dist::Communicator* context) {
  TIDAL_CHECK(!layers.empty(), "[moe] load-balancing loss over no sparse layers");
  Tensor probs = layers[0].prob_sum, counts = layers[0].topk_counts;
  int64_t n = layers[0].tokens;
  for (size_t i = 1; i < layers.size(); ++i) {
    probs = add(probs, layers[i].prob_sum);
    counts = add(counts, layers[i].topk_counts);
    n += layers[i].tokens;
  }
  double scale = double(experts) / (double(n) * double(n));
  if (context != nullptr && context->size() > 1) {
    // Context parallel: the sample's counts and token total are the group's. This rank's term pairs them
    // with its own probabilities; the terms of the C ranks sum to the whole sequence's loss, and each
    // rank's loss is a C-th of the sample's (train/step.cpp), so the term is scaled by C.
    counts = counts.clone();  // (k, E)
    dist::all_reduce_sum(*context, counts);
    const double c = double(context->size()), total = double(n) * c;
    scale = double(experts) * c / (total * total);
  }
  // (k, E) * (E) summed: E * sum tokens_per_expert * router_prob_per_expert
  return mul(sum(mul(counts, probs)), scale);
}

}  // namespace tidal::models
