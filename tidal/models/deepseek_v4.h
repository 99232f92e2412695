#pragma once
// DeepSeek-V4 (transformers' DeepseekV4ForCausalLM), with its names: embed_tokens -> hc_mult copies of each
// token's embedding (the mHC streams, models/hyper_connection.h) -> decoder layers -> hc_head (collapses the
// streams) -> norm -> lm_head. A decoder layer (DeepseekV4DecoderLayer):
//   attn_hc collapses the streams, input_layernorm, self_attn (models/deepseek_v4_attention.h), attn_hc
//   expands its output back; ffn_hc collapses, post_attention_layernorm, mlp (models/deepseek_v4_moe.h: every
//   layer a MoE, hash-routed or top-k), ffn_hc expands.
// Recompute: whole layers, the core_attn and moe checkpoints, MindSpeed-LLM's --recompute-csa-attention (the
// compressed layers' attention in one checkpoint, models/deepseek_v4_attention.h) and --mhc-recompute (Note [mHC
// recompute], models/hyper_connection.h); memory/recompute.cpp refuses the rest. Built: sliding, HCA and CSA layers.
// Expert parallel: each layer's experts divided among the group (models/deepseek_v4_moe.h).
// Not supported yet, refused at the forward: context parallelism and packed documents (the sliding mask is the whole
// sequence's), the MTP module (transformers' causal LM builds none either).
#include "tidal/models/causal_lm.h"
#include "tidal/models/deepseek_v4_attention.h"
#include "tidal/models/deepseek_v4_moe.h"
#include "tidal/models/hyper_connection.h"
#include "tidal/models/layer_recompute.h"

namespace tidal::models {

class DeepseekV4DecoderLayer : public nn::Module {
 public:
  // `experts`: expert parallelism's group (models/deepseek_v4_moe.h); null: every expert here.
  DeepseekV4DecoderLayer(const ModelConfig& c, int64_t index, const nn::Init& init,
                         std::shared_ptr<dist::Communicator> experts = nullptr);
  // streams (B, T, N, C), ids (B, T) -> streams. rc.core_attn checkpoints the attention core (scores, softmax,
  // @ values), rc.csa_attention a compressed layer's whole compressed attention, rc.moe the MoE block, rc.mhc the
  // mHC mappings; full recompute wraps the whole layer (CausalLM::run_layers).
  // mask: the eager attention core's (T, T); undefined for the flash core (DeepseekV4Attention).
  Tensor forward(const Tensor& streams, const Tensor& ids, const RopeTables& rope, const Tensor& mask,
                 AttentionKernel kernel, const ModelConfig& c, const LayerRecompute& rc) const;
  const DeepseekV4Moe& mlp() const { return *mlp_; }

 private:
  HyperConnection* attn_hc_;
  HyperConnection* ffn_hc_;
  nn::RMSNorm* input_layernorm_;
  nn::RMSNorm* post_attention_layernorm_;
  DeepseekV4Attention* self_attn_;
  DeepseekV4Moe* mlp_;
};

class DeepseekV4 : public CausalLM {
 public:
  DeepseekV4(const ModelConfig& c, const nn::Init& init, std::shared_ptr<dist::Communicator> experts = nullptr);
  const Tensor& lm_head_weight() const override;
  void update_expert_biases(dist::Communicator& group) const override;  // the top-k layers' (not the hash layers)

 protected:
  ModelOutput hidden_states(const Tensor& ids, const DocumentLayout& docs, const MtpIds& mtp) const override;

 private:
  nn::Embedding* embed_tokens_;
  nn::ModuleList<DeepseekV4DecoderLayer>* layers_;
  nn::RMSNorm* norm_;
  HyperHead* hc_head_;
  nn::Linear* lm_head_ = nullptr;  // untied only
};

// The mHC settings of a config.
HyperConnectionConfig hyper_connection_config(const ModelConfig& c);

}  // namespace tidal::models
