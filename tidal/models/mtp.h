#pragma once
// DeepSeek-V3's multi-token prediction (MTP; Megatron-LM's --mtp-num-layers, its MultiTokenPredictionLayer):
// depth k = 1..D predicts the token k + 1 places ahead. Its input at position i is the previous depth's output
// there (the main model's final hidden state for k = 1) and the embedding of token i + k (the input ids rolled
// left by k, 0 rolled in), combined as
//   x = eh_proj(cat(enorm(embed(ids_k)), hnorm(h_{k-1})))   (B, T, 2C) -> (B, T, C)
// then one decoder layer of the model's own kind (numbered after the last: a sparse MoE layer in DeepSeek-V3)
// and shared_head.norm, whose output h_k goes to the shared LM head and to depth k + 1. The embedding and the
// head are the main model's. Hugging Face names, as DeepSeek publishes them: model.layers.<L + k - 1>.{enorm,
// hnorm, eh_proj, shared_head.norm, self_attn, mlp, input_layernorm, post_attention_layernorm}.
#include "tidal/models/llama.h"

namespace tidal::models {

class MtpLayer : public LlamaDecoderLayer {
 public:
  // Depth `depth` (1-based) of a model of c.num_hidden_layers layers: layer index num_hidden_layers + depth - 1.
  MtpLayer(const ModelConfig& c, int64_t depth, const nn::Init& init,
           const std::shared_ptr<dist::Communicator>& experts);
  // h (B, T, C): the previous depth's output; embedded (B, T, C): the embedding of the ids rolled left by the
  // depth. Returns {h_k (B, T, C) after shared_head.norm, router prob_sum, top-k counts (sparse layers)}.
  std::vector<Tensor> forward(const Tensor& h, const Tensor& embedded, const RopeTables& rope, const ModelConfig& c,
                              const CoreAttention& attn, bool training, const LayerRecompute& rc) const;

 private:
  nn::RMSNorm* enorm_;
  nn::RMSNorm* hnorm_;
  nn::Linear* eh_proj_;
  nn::RMSNorm* head_norm_;  // shared_head.norm
};

}  // namespace tidal::models
