#pragma once
// GPT-2 (Radford et al., 2019) with Hugging Face's GPT2LMHeadModel names and layouts: learned
// positions, pre-LayerNorm blocks, fused qkv Conv1D, GELU (tanh), tied embeddings, biases.
#include "tidal/models/causal_lm.h"

namespace tidal::models {

class Gpt2Block : public nn::Module {
 public:
  Gpt2Block(const ModelConfig& c, const nn::Init& init);
  // x (B, T, C) -> (B, T, C), with the layer's recompute policies (layer_recompute.h).
  Tensor forward(const Tensor& x, const ModelConfig& c, const CoreAttention& attn, bool training,
                 const LayerRecompute& rc) const;

 private:
  const nn::Module* attn_;  // "attn" and "mlp": name the ops in between (attention core, GELU)
  const nn::Module* mlp_;
  nn::LayerNorm* ln_1_;
  nn::Conv1D* c_attn_;
  nn::Conv1D* attn_proj_;
  nn::LayerNorm* ln_2_;
  nn::Conv1D* c_fc_;
  nn::Conv1D* mlp_proj_;
};

class Gpt2 : public CausalLM {
 public:
  Gpt2(const ModelConfig& c, const nn::Init& init);
  const Tensor& lm_head_weight() const override { return wte_->weight(); }

 protected:
  ModelOutput hidden_states(const Tensor& ids, const DocumentLayout& docs, const MtpIds& mtp) const override;

 private:
  nn::Embedding* wte_;
  nn::Embedding* wpe_;
  nn::ModuleList<Gpt2Block>* h_;
  nn::LayerNorm* ln_f_;
};

}  // namespace tidal::models
