#include "tidal/models/gemma3.h"

#include <cmath>

#include "tidal/autograd/checkpoint.h"
#include "tidal/autograd/checkpoint_without_output.h"
#include "tidal/memory_scope.h"
#include "tidal/ops/elementwise.h"

namespace tidal::models {
namespace {

constexpr double kGemmaNormOffset = 1.0;  // Gemma3RMSNorm: x_normed * (1 + w)

std::unique_ptr<nn::RMSNorm> gemma_norm(const ModelConfig& c, const nn::Init& init) {
  return std::make_unique<nn::RMSNorm>(c.hidden_size, c.norm_eps, init, kGemmaNormOffset);
}

}  // namespace

Gemma3DecoderLayer::Gemma3DecoderLayer(const ModelConfig& c, int64_t index, const nn::Init& init) {
  input_layernorm_ = &register_module("input_layernorm", gemma_norm(c, init));
  self_attn_ = &register_module("self_attn", std::make_unique<LlamaAttention>(c, index, init));
  post_attention_layernorm_ = &register_module("post_attention_layernorm", gemma_norm(c, init));
  pre_feedforward_layernorm_ = &register_module("pre_feedforward_layernorm", gemma_norm(c, init));
  mlp_ = &register_module(
      "mlp", std::make_unique<SwiGluMlp>(c.hidden_size, c.intermediate_size, init, GluActivation::gelu_tanh));
  post_feedforward_layernorm_ = &register_module("post_feedforward_layernorm", gemma_norm(c, init));
}

Tensor Gemma3DecoderLayer::forward(const Tensor& x, const RopeTables& rope, const ModelConfig& c,
                                   const CoreAttention& attn, bool training, const LayerRecompute& rc) const {
  // input_layernorm -> q/k/v projections (norm recompute: its output freed once they saved it).
  std::vector<Tensor> qkv = autograd::with_discarded_outputs(
      rc.norm, [this](const std::vector<Tensor>& in) { return std::vector<Tensor>{input_layernorm_->forward(in[0])}; },
      {x}, [this, &c](const std::vector<Tensor>& h) { return self_attn_->project(h[0], c); });
  const Tensor a = self_attn_->attend(qkv, rope, c, attn, training, rc);  // (B, T, C)
  Tensor x1 = add(x, post_attention_layernorm_->forward(a));              // (B, T, C)
  auto norm2 = [this](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{pre_feedforward_layernorm_->forward(in[0])};
  };
  Tensor m;
  if (rc.mlp) {  // the whole MLP in one checkpoint (the norm's consumer)
    m = autograd::with_discarded_outputs(rc.norm, norm2, {x1}, [this](const std::vector<Tensor>& h) {
      return autograd::checkpoint(
          [this](const std::vector<Tensor>& hh) { return std::vector<Tensor>{mlp_->forward(hh[0])}; }, h);
    })[0];
  } else {
    std::vector<Tensor> gate_up = autograd::with_discarded_outputs(
        rc.norm, norm2, {x1}, [this](const std::vector<Tensor>& h) { return mlp_->project(h[0]); });
    m = mlp_->finish(gate_up, rc.activation);
  }
  return add(x1, post_feedforward_layernorm_->forward(m));  // (B, T, C)
}

Gemma3::Gemma3(const ModelConfig& c, const nn::Init& init) : CausalLM(c) {
  nn::ModuleDict& model = register_module("model", std::make_unique<nn::ModuleDict>());
  embed_tokens_ =
      model.add("embed_tokens", std::make_unique<nn::Embedding>(c.vocab_size, c.hidden_size, init, c.pad_token_id));
  layers_ = model.add("layers", std::make_unique<nn::ModuleList<Gemma3DecoderLayer>>());
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) layers_->add(std::make_unique<Gemma3DecoderLayer>(c, l, init));
  norm_ = model.add("norm", gemma_norm(c, init));
  if (!c.tie_word_embeddings) {
    lm_head_ = &register_module("lm_head", std::make_unique<nn::Linear>(c.hidden_size, c.vocab_size, false, init));
    lm_head_->refuse_lora();  // the loss reads its weight (lm_head_weight())
  }
}

const Tensor& Gemma3::lm_head_weight() const {
  return lm_head_ != nullptr ? lm_head_->weight() : embed_tokens_->weight();
}

ModelOutput Gemma3::hidden_states(const Tensor& ids, const DocumentLayout& docs,
                                  const MtpIds& /*mtp: none (ModelConfig::validate)*/) const {
  const CoreAttention attn = core_attention(docs.starts);
  const int64_t t = checked_sequence_length(ids, attn);
  const DType dtype = embed_tokens_->weight().dtype();
  // Full layers: rope_theta with the rope type's scaling; sliding layers: rope_local_base_freq, unscaled.
  int64_t full = 0, sliding = 0;
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) (config_.attention_window(l) > 0 ? sliding : full) = l;
  const RopeTables global = rope_at_positions(attn, ids.size(1), config_.layer_rope_frequencies(full, t), dtype,
                                              ids.device(), docs.positions);
  const RopeTables local = rope_at_positions(attn, ids.size(1), config_.layer_rope_frequencies(sliding, t), dtype,
                                             ids.device(), docs.positions);
  // Gemma3TextScaledWordEmbedding: times sqrt(hidden) rounded to the weight's dtype (bf16: sqrt(1152) is 34).
  const double scale = scalar_tensor(std::sqrt(double(config_.hidden_size)), dtype).item<double>();
  Tensor x = mul(embed_tokens_->forward(ids), scale);  // (B, T, C)
  x = run_layers(
      std::move(x),
      [this, global, local, attn](int64_t l, const std::vector<Tensor>& in) {
        const RopeTables& rope = config_.attention_window(l) > 0 ? local : global;
        return std::vector<Tensor>{
            (*layers_)[size_t(l)].forward(in[0], rope, config_, attn, is_training(), recompute_of(l))};
      },
      nullptr);
  return ModelOutput{norm_->forward(x), Tensor(), Tensor(), {}};
}

}  // namespace tidal::models
