#pragma once
// DeepSeek-V4's MoE block (transformers' DeepseekV4SparseMoeBlock), with its names:
//   gate.weight (E, C): logits = x W^T, scores = sqrt(softplus(logits))
//   which experts: top-k of scores + gate.e_score_correction_bias (E) f32 (mlp_layer_types moe), or the fixed
//     rows gate.tid2eid[token id] (V, k) i64 (hash_moe: the table is a buffer, loaded with the checkpoint)
//   weights: the chosen scores renormalized to sum 1, times routed_scaling_factor
//   experts.gate_up_proj (E, 2F, C) and experts.down_proj (E, C, F): each chosen expert's SwiGLU of its tokens,
//     the gate clamped above at swiglu_limit and up within +-swiglu_limit, weighted and summed per token
//   plus shared_experts.{gate,up,down}_proj on every token, clamped the same way.
// Each expert runs one product over its tokens, experts in index order (transformers' order of sums). On the
// meta device (no ids, no scores) the slots go round the experts evenly, the planner's assumption.
#include "tidal/models/config.h"
#include "tidal/models/moe.h"
#include "tidal/nn/layers.h"

namespace tidal::models {

class DeepseekV4Moe : public nn::Module {
 public:
  DeepseekV4Moe(const ModelConfig& c, int64_t layer, const nn::Init& init);
  // x (B, T, C), ids (B, T) i64 (read by hash layers) -> (B, T, C).
  Tensor forward(const Tensor& x, const Tensor& ids) const;
  bool hash() const { return hash_; }

 private:
  // (N, k) i64 on the host: the experts of each token.
  std::vector<int64_t> choose(const Tensor& scores, const Tensor& ids) const;

  int64_t experts_, top_k_;
  double scaling_, limit_;
  bool hash_;
  nn::Module* gate_;
  Tensor gate_weight_;  // (E, C)
  Tensor bias_;         // (E) f32, top-k routers
  Tensor tid2eid_;      // (V, k) i64, hash routers
  Tensor gate_up_;      // (E, 2F, C)
  Tensor down_;         // (E, C, F)
  SwiGluMlp* shared_;   // with the clamp
};

}  // namespace tidal::models
