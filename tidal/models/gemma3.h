#pragma once
// Gemma 3's text model with Hugging Face's names (Gemma3ForCausalLM, model_type gemma3_text): the
// embedding scaled by sqrt(hidden), four (1 + w) RMSNorms a layer (input, post_attention on the
// attention's output, pre_feedforward, post_feedforward on the MLP's output), Llama's attention with
// QK-norm and the query_pre_attn_scalar scale, sliding and full layers (layer_types) with their own RoPE
// tables (rope_local_base_freq for sliding layers), a GeGLU MLP, a tied head.
#include "tidal/models/llama.h"

namespace tidal::models {

class Gemma3DecoderLayer : public nn::Module {
 public:
  Gemma3DecoderLayer(const ModelConfig& c, int64_t index, const nn::Init& init);
  // x (B, T, C) -> x; rope: this layer's table (sliding or full).
  Tensor forward(const Tensor& x, const RopeTables& rope, const ModelConfig& c, const CoreAttention& attn,
                 bool training, const LayerRecompute& rc) const;

 private:
  nn::RMSNorm* input_layernorm_;
  LlamaAttention* self_attn_;
  nn::RMSNorm* post_attention_layernorm_;
  nn::RMSNorm* pre_feedforward_layernorm_;
  SwiGluMlp* mlp_;  // GeGLU
  nn::RMSNorm* post_feedforward_layernorm_;
};

class Gemma3 : public CausalLM {
 public:
  Gemma3(const ModelConfig& c, const nn::Init& init);
  const Tensor& lm_head_weight() const override;

 protected:
  ModelOutput hidden_states(const Tensor& ids, const DocumentLayout& docs, const MtpIds& mtp) const override;

 private:
  nn::Embedding* embed_tokens_;
  nn::ModuleList<Gemma3DecoderLayer>* layers_;
  nn::RMSNorm* norm_;
  nn::Linear* lm_head_ = nullptr;  // untied only
};

}  // namespace tidal::models
