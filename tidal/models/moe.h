#pragma once
// Qwen3-MoE's sparse MLP (Hugging Face Qwen3MoeSparseMoeBlock): a softmax router picks the top-k of E
// SwiGLU experts per token, optionally renormalizes their weights (norm_topk_prob), and sums the
// experts' outputs weighted. Tokens are grouped per expert with a stable sort, so each expert runs
// one matrix product over its tokens. The routing decision goes through checkpoint_decision: a
// recompute replays exactly the experts of the first run.
#include "tidal/models/config.h"
#include "tidal/nn/layers.h"

namespace tidal::models {

class SwiGluMlp : public nn::Module {
 public:
  SwiGluMlp(int64_t hidden, int64_t ffn, const nn::Init& init);
  // (..., C) -> (..., C); `recompute_act`: the SwiGLU output is freed once down_proj saved it and
  // recomputed before down_proj's backward (activation-function / moe_act recompute).
  Tensor forward(const Tensor& x, bool recompute_act = false) const;
  // The two halves, for callers that need the projections' outputs: {gate (..., F), up (..., F)}, then
  // down_proj(swiglu(gate, up)).
  std::vector<Tensor> project(const Tensor& x) const;
  Tensor finish(const std::vector<Tensor>& gate_up, bool recompute_act) const;

 private:
  nn::Linear* gate_proj_;
  nn::Linear* up_proj_;
  nn::Linear* down_proj_;
};

// What a sparse block contributes to the load-balancing loss (Switch Transformer / HF
// load_balancing_loss_func): summed over the layer's tokens.
struct RouterStats {
  Tensor prob_sum;     // (E) sum over tokens of the router probabilities (differentiable)
  Tensor topk_counts;  // (k, E) f32: how many tokens chose expert e as their j-th choice (constant)
  int64_t tokens = 0;
};

class SparseMoeBlock : public nn::Module {
 public:
  SparseMoeBlock(const ModelConfig& c, const nn::Init& init);
  // x (B, T, C) -> (B, T, C); fills `stats` for the auxiliary loss. `recompute_act`: moe_act.
  Tensor forward(const Tensor& x, RouterStats& stats, bool recompute_act = false) const;

 private:
  int64_t experts_, top_k_;
  bool norm_topk_;
  nn::Linear* gate_;
  nn::ModuleList<SwiGluMlp>* experts_list_;
};

// HF's load_balancing_loss_func over the sparse layers of one forward pass:
// E * sum_{j,e} (counts[j, e] / N) * (prob_sum[e] / N), N = tokens over all sparse layers.
Tensor load_balancing_loss(const std::vector<RouterStats>& layers, int64_t experts);

}  // namespace tidal::models
