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
//
// Expert parallel (create_model's `experts`, docs/distributed.md "Expert parallel"): rank r of the group holds
// experts [r L, (r + 1) L) (L = E / ranks) as rows of the stacked tensors, nn::Slab parameters under the whole
// tensors' names (experts.gate_up_proj (L, 2F, C) of (E, 2F, C)): a checkpoint saves each rank's rows as a piece
// of the whole tensor and loads each rank's rows from it. The rows go to their experts' owners and back
// (models/expert_dispatch.h); each expert's values are those of the whole model (the draws of the other ranks'
// rows are skipped).
#include <memory>
#include <vector>

#include "tidal/dist/communicator.h"
#include "tidal/models/config.h"
#include "tidal/models/moe.h"
#include "tidal/nn/layers.h"

namespace tidal::models {

class DeepseekV4Moe : public nn::Module {
 public:
  // `expert_group` (expert parallel): the ranks the layer divides its experts among; null: every expert here.
  DeepseekV4Moe(const ModelConfig& c, int64_t layer, const nn::Init& init,
                std::shared_ptr<dist::Communicator> expert_group = nullptr);
  // x (B, T, C), ids (B, T) i64 (read by hash layers) -> (B, T, C).
  Tensor forward(const Tensor& x, const Tensor& ids) const;
  bool hash() const { return hash_; }
  // --moe-router-enable-expert-bias (a top-k layer; hash layers have no bias): Megatron-LM's update of
  // gate.e_score_correction_bias from the tokens each expert got since the last (update_bias_from_load, models/moe.h).
  void update_expert_bias(dist::Communicator& group) const;

 private:
  // (N, k) i64 on the host: the experts of each token.
  std::vector<int64_t> choose(const Tensor& scores, const Tensor& ids) const;
  // This rank's experts on their rows: rows (R, C) grouped by local expert, counts[l] of them for expert l -> (R, C).
  Tensor run_local(const Tensor& rows, const std::vector<int64_t>& counts) const;

  int64_t experts_, top_k_;
  double scaling_, limit_;
  bool hash_;
  nn::Module* gate_;
  Tensor gate_weight_;  // (E, C)
  Tensor bias_;         // (E) f32, top-k routers
  Tensor tid2eid_;      // (V, k) i64, hash routers
  Tensor load_;         // (E) f32: tokens per expert since the last bias update (top-k routers with an update rate)
  double rate_ = 0;     // the bias update rate
  Tensor gate_up_;      // (L, 2F, C): this rank's L experts (all E without expert parallelism)
  Tensor down_;         // (L, C, F)
  std::shared_ptr<dist::Communicator> group_;  // expert parallel; null: every expert is here
  SwiGluMlp* shared_;                          // with the clamp
};

}  // namespace tidal::models
