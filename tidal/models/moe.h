#pragma once
// Qwen3-MoE's sparse MLP (Hugging Face Qwen3MoeSparseMoeBlock): a softmax router picks the top-k of E
// SwiGLU experts per token, optionally renormalizes their weights (norm_topk_prob), and sums the
// experts' outputs weighted. DeepSeek-V3's (DeepseekV3MoE): sigmoid scores, the choice made on the scores
// plus a per-expert correction bias within the topk_group best expert groups, the chosen scores
// renormalized and times routed_scaling_factor, plus shared experts that every token goes through. Tokens are grouped
// per expert with a stable sort, so each expert runs one matrix product over its tokens. The routing decision goes
// through checkpoint_decision: a recompute replays exactly the experts of the first run.
//
// Expert parallel (create_model's `experts`, docs/distributed.md): the block builds only its rank's
// block of experts (named by their global index, as in the whole model) and exchanges the tokens with
// the group's other ranks (Megatron's all-to-all token dispatcher): the rows sorted by expert go to the
// experts' owners, run there one matrix product per local expert, come back and are combined.
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tidal/dist/communicator.h"
#include "tidal/models/config.h"
#include "tidal/nn/layers.h"
#include "tidal/ops/activation.h"

namespace tidal::models {

// DeepSeek-V4's clamp of a SwiGLU's inputs (swiglu_limit l > 0): {min(gate, l), clamp(up, -l, l)}; l 0: unchanged.
std::vector<Tensor> clamp_gate_up(const Tensor& gate, const Tensor& up, double limit);

class SwiGluMlp : public nn::Module {
 public:
  // act: silu (SwiGLU: Llama, Qwen, Mistral) or gelu_tanh (GeGLU: Gemma 3). limit: clamp_gate_up's (DeepSeek-V4).
  SwiGluMlp(int64_t hidden, int64_t ffn, const nn::Init& init, GluActivation act = GluActivation::silu,
            double limit = 0);
  // (..., C) -> (..., C); `recompute_act`: the SwiGLU output is freed once down_proj saved it and
  // recomputed before down_proj's backward (activation-function / moe_act recompute).
  Tensor forward(const Tensor& x, bool recompute_act = false) const;
  // The two halves, for callers that need the projections' outputs: {gate (..., F), up (..., F)}, then
  // down_proj(swiglu(gate, up)).
  std::vector<Tensor> project(const Tensor& x) const;
  Tensor finish(const std::vector<Tensor>& gate_up, bool recompute_act) const;

  const nn::Linear& gate_proj() const { return *gate_proj_; }
  const nn::Linear& up_proj() const { return *up_proj_; }
  const nn::Linear& down_proj() const { return *down_proj_; }
  GluActivation activation() const { return act_; }
  double limit() const { return limit_; }

 private:
  nn::Linear* gate_proj_;
  nn::Linear* up_proj_;
  nn::Linear* down_proj_;
  GluActivation act_;
  double limit_;
};

// Experts' MLPs on their rows: rows (M, C) grouped by expert, counts[i] of them for experts[i] (all alike) ->
// (M, C), each row through its expert. One grouped product per projection (ops/grouped_linear.h) and the
// activation on all rows at once: row for row what each expert's forward computes, with the same recompute
// (`recompute_act`) and the same tensors kept, as one storage each. An expert with a LoRA adapter makes it
// each expert's forward in turn. `module`: the name the memory report gives the tensors (the experts' dict).
Tensor run_experts(const std::vector<SwiGluMlp*>& experts, const Tensor& rows, const std::vector<int64_t>& counts,
                   bool recompute_act, const char* module);

// What a sparse block contributes to the load-balancing loss (Switch Transformer / HF
// load_balancing_loss_func): summed over the layer's tokens.
// Token dropping (ModelConfig::moe_expert_capacity_factor, Megatron-LM's apply_router_token_dropping):
// the capacity of each expert for `tokens` tokens of `top_k` slots each, ceil(tokens x top_k / experts x
// factor) (Megatron's get_capacity of tokens x top_k).
int64_t expert_capacity(int64_t tokens, int64_t top_k, int64_t experts, double factor);
// The rows the experts run under a capacity, from the routing of N = batch x seq tokens (`chosen`
// (N, k) i64 and their weights (N, k) f32, after norm_topk_prob): a (3, M) i64 tensor of {token, slot
// (n x k + j), expert} grouped by expert in expert order, each expert's rows in token order. An expert
// chosen by more slots than its capacity keeps, by the policy, those of the highest weights (ties: the
// earlier position) or the earliest positions; the position of token b x seq + t is t x batch + b,
// Megatron's [sequence, batch] order. The dropped slots are not there: they contribute nothing, and
// the kept weights are not renormalized (Megatron). With padding, each expert's rows are completed
// to min(capacity, N) with tokens that did not choose it, earliest position first, whose slot is N x k
// (a weight of zero). `dropped` gets the number of slots dropped. On meta tensors the routing is taken
// as even (the planner's assumption) and nothing is counted.
Tensor capacity_routing(const Tensor& chosen, const Tensor& weights, int64_t batch, int64_t experts,
                        const ModelConfig& c, int64_t& dropped);
// The (token, expert) slots routed under a capacity and those dropped by the forwards since the last
// call (replays of a recompute not counted), summed over the blocks of this process; resets both.
// For the step log.
struct DroppedSlots {
  int64_t routed = 0, dropped = 0;
};
DroppedSlots take_dropped_slots();

// The router (Hugging Face's `gate`): logits = x W^T with W (E, C), and for DeepSeek-V3 the correction
// bias e_score_correction_bias (E) f32, a buffer: saved and loaded, never trained by gradients.
class Router : public nn::Linear {
 public:
  Router(const ModelConfig& c, const nn::Init& init);
  // The bias (E) f32; undefined without one.
  const Tensor& expert_bias() const { return bias_; }
  // x (N, C) -> the logits (N, E) f32: in x's dtype, then widened (Qwen3-MoE's gate), or for sigmoid routers
  // in f32 throughout (transformers' DeepSeek-V3 router: F.linear(x.float(), W.float()), its weight kept in
  // f32), so bf16 models choose their experts from unrounded logits.
  Tensor logits(const Tensor& x) const;
  // Which experts each token goes to, from its scores (N, E) f32 (no gradient): (N, k) i64. Without a
  // bias, the top-k scores; with one, the top-k of scores + bias among the experts of the topk_group
  // groups (of n_group) whose two best such values sum highest.
  Tensor choose(const Tensor& scores) const;

  // With a bias update rate (ModelConfig::moe_router_bias_update_rate): the tokens routed to each expert
  // since the last update, a non-persistent buffer `tokens_per_expert` (E) f32; training forwards add theirs
  // (`counts` (E)), a recompute's replay does not.
  bool tracks_load() const { return load_.defined(); }
  void add_load(const Tensor& counts) const;
  // Megatron-LM's expert-bias update: the loads summed over `group` (every rank whose tokens differ),
  // bias_e += rate x sign(mean_e' load - load_e) in f32, the loads reset. Every rank of `group` calls it.
  void update_expert_bias(dist::Communicator& group);

 private:
  int64_t experts_, top_k_, groups_, top_groups_;
  bool f32_logits_ = false;
  double rate_ = 0;
  Tensor bias_;  // (E) f32
  Tensor load_;  // (E) f32
};

// Every router's update_expert_bias (a model without router biases, or a frozen one: nothing): the model's
// CausalLM::update_expert_biases.
class CausalLM;
void update_expert_biases(const CausalLM& model, dist::Communicator& group);
// Megatron-LM's expert-bias update of `bias` (E) f32 from `load` (E) f32, the tokens each expert got since the last
// update, summed over `group`: bias_e += rate x sign(mean_e' load - load_e), in f32; the load reset to zeros. A meta
// load (a dry run: no counts) changes nothing. Every rank of `group` calls it.
void update_bias_from_load(const Tensor& bias, const Tensor& load, double rate, dist::Communicator& group);

struct RouterStats {
  Tensor prob_sum;     // (E) sum over tokens of the router probabilities (differentiable)
  Tensor topk_counts;  // (k, E) f32: how many tokens chose expert e as their j-th choice (constant)
  int64_t tokens = 0;
};

class SparseMoeBlock : public nn::Module {
 public:
  // `expert_group` (expert parallel): the ranks the block divides its experts among, this rank building its
  // block of them; null: every expert here.
  SparseMoeBlock(const ModelConfig& c, const nn::Init& init, std::shared_ptr<dist::Communicator> expert_group);
  Router& router() const { return *gate_; }
  // x (B, T, C) -> (B, T, C); fills `stats` for the auxiliary loss. `recompute_act`: moe_act.
  Tensor forward(const Tensor& x, RouterStats& stats, bool recompute_act = false) const;

 private:
  // Expert parallel: the slots' rows (`slot_token` of `flat`, sorted by expert; `counts` per expert)
  // through their experts on the group's ranks, weighted: (N*k, C) in slot order.
  Tensor run_on_owners(const Tensor& flat, const Tensor& slot_token, const Tensor& slot_weight,
                       const std::vector<int64_t>& counts, bool recompute_act) const;

  int64_t experts_, top_k_;
  bool norm_topk_;
  ModelConfig capacity_;  // its moe_expert_capacity_factor, drop policy and padding, and the routing
  Router* gate_;
  SwiGluMlp* shared_ = nullptr;                // DeepSeek-V3's shared experts
  std::shared_ptr<dist::Communicator> group_;  // expert parallel; null: every expert is here
  std::vector<SwiGluMlp*> local_;              // this rank's experts, in global order
  nn::Module* experts_module_ = nullptr;       // their dict ("experts")
};

// Whether a parameter of the model (by its name) belongs to an expert: under expert parallelism its
// gradient is summed over the expert-data-parallel ranks only.
bool is_expert_parameter(const std::string& name);
// The expert a parameter (or a state named after it, "<name>.exp_avg") belongs to: its name up to the
// expert's index ("model.layers.1.mlp.experts.2"); "" for the rest.
std::string expert_of(const std::string& name);
// Expert parallel: which tensors of a whole model's checkpoint (every expert, as one process saves it)
// this rank takes, by name: all but the experts of other ranks, i.e. those whose expert_of is not
// the expert of one of `names` (this rank's parameters). A name of no expert is kept, so a strict
// load still refuses what belongs to no parameter.
std::function<bool(const std::string&)> held_here(const std::vector<std::string>& names);

// HF's load_balancing_loss_func over the sparse layers of one forward pass:
// E * sum_{j,e} (counts[j, e] / N) * (prob_sum[e] / N), N = tokens over all sparse layers.
// `context`: the context-parallel group, whose ranks hold the chunks of the same samples: the counts
// and N are the group's sums, and this rank's term (scaled by C, as its cross-entropy is a C-th of
// the sample's) takes its own probabilities, so the group's terms average to one process's loss.
Tensor load_balancing_loss(const std::vector<RouterStats>& layers, int64_t experts,
                           dist::Communicator* context = nullptr);

}  // namespace tidal::models
