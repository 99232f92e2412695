#pragma once
// The Llama family with Hugging Face names: Llama (LlamaForCausalLM, Llama 3.x's RoPE scaling),
// Mistral (sliding-window attention), Qwen2/2.5 (q/k/v biases), Qwen3 (adds per-head QK RMSNorm),
// Qwen3-MoE (sparse MLP layers mixed with dense ones by config) and DeepSeek-V3 (multi-head latent
// attention, models/mla.h; its MoE with shared experts, models/moe.h). Pre-RMSNorm blocks, rotary embeddings
// (HF layout), grouped-query attention, SwiGLU MLPs, tied or untied embeddings.
#include "tidal/models/attention_block.h"
#include "tidal/models/causal_lm.h"
#include "tidal/models/moe.h"
#include "tidal/ops/rope.h"

namespace tidal::models {

class LlamaAttention : public AttentionBlock {
 public:
  // Layer `layer` of the model (its attention window: ModelConfig::attention_window).
  LlamaAttention(const ModelConfig& c, int64_t layer, const nn::Init& init);
  // The projections: h (B, T, C) normalized -> {q (B, T, H, hd), k (B, T, Hkv, hd), v (B, T, Hkv, hd)}.
  std::vector<Tensor> project(const Tensor& h, const ModelConfig& c) const override;
  // The rest: QK-norm, RoPE, the attention core (checkpointed with rc.core_attn under the eager kernel)
  // and the output projection -> (B, T, C).
  Tensor attend(const std::vector<Tensor>& qkv, const RopeTables& rope, const ModelConfig& c, const CoreAttention& attn,
                bool training, const LayerRecompute& rc) const override;

 private:
  nn::Linear* q_proj_;
  nn::Linear* k_proj_;
  nn::Linear* v_proj_;
  nn::Linear* o_proj_;
  nn::RMSNorm* q_norm_ = nullptr;
  nn::RMSNorm* k_norm_ = nullptr;
  int64_t window_ = 0;  // keys each query sees, itself included (0: all earlier ones)
};

class LlamaDecoderLayer : public nn::Module {
 public:
  LlamaDecoderLayer(const ModelConfig& c, int64_t index, const nn::Init& init,
                    const std::shared_ptr<dist::Communicator>& experts);
  // {x (B, T, C)} -> {x} for dense layers, {x, router prob_sum (E), top-k counts (k, E)} for sparse.
  std::vector<Tensor> forward(const Tensor& x, const RopeTables& rope, const ModelConfig& c, const CoreAttention& attn,
                              bool training, const LayerRecompute& rc) const;
  bool sparse() const { return moe_ != nullptr; }
  Router* router() const { return moe_ != nullptr ? &moe_->router() : nullptr; }

 private:
  nn::RMSNorm* input_layernorm_;
  AttentionBlock* self_attn_;  // LlamaAttention, or MlaAttention (DeepSeek-V3)
  nn::RMSNorm* post_attention_layernorm_;
  SwiGluMlp* mlp_ = nullptr;
  SparseMoeBlock* moe_ = nullptr;
};

// The RoPE tables (T_local, hd) of the tokens' global positions: the whole sequence, or under context
// parallelism this rank's chunks (CoreAttention::positions). With `positions` (B, T_local) i32 (packed
// documents, --reset-position-ids) the tables (B, T_local, hd) of those positions instead.
RopeTables rope_at_positions(const CoreAttention& attn, int64_t local_len, const RopeFrequencies& freqs, DType dtype,
                             const Device& device, const Tensor& positions = Tensor());

class MtpLayer;

class Llama : public CausalLM {
 public:
  Llama(const ModelConfig& c, const nn::Init& init, std::shared_ptr<dist::Communicator> experts);
  const Tensor& lm_head_weight() const override;
  std::vector<Router*> routers() const override;

 protected:
  ModelOutput hidden_states(const Tensor& ids, const DocumentLayout& docs, const MtpIds& mtp) const override;

 private:
  nn::Embedding* embed_tokens_;
  nn::ModuleList<LlamaDecoderLayer>* layers_;
  nn::RMSNorm* norm_;
  nn::Linear* lm_head_ = nullptr;  // untied only
  std::vector<MtpLayer*> mtp_;     // the multi-token-prediction depths (models/mtp.h), in layers_ after the layers

  // The MTP depths' outputs (B, T, C) from the main model's final hidden states; a sparse depth's router
  // statistics are appended to `extras`.
  std::vector<Tensor> mtp_hidden_states(const Tensor& hidden, const MtpIds& ids, const RopeTables& rope,
                                        const CoreAttention& attn, std::vector<std::vector<Tensor>>* extras) const;
};

}  // namespace tidal::models
