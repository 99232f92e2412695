#include "tidal/models/llama.h"

#include "tidal/memory_scope.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/random.h"
#include "tidal/ops/view.h"

namespace tidal::models {
namespace {

class Holder : public nn::Module {
 public:
  template <typename M>
  M* add(const std::string& name, std::unique_ptr<M> m) {
    return &register_module(name, std::move(m));
  }
};

}  // namespace

LlamaAttention::LlamaAttention(const ModelConfig& c, const nn::Init& init) {
  const int64_t d = c.hidden_size, hd = c.head_size(), h = c.num_attention_heads, kv = c.kv_heads();
  q_proj_ = &register_module("q_proj", std::make_unique<nn::Linear>(d, h * hd, c.attention_bias, init));
  k_proj_ = &register_module("k_proj", std::make_unique<nn::Linear>(d, kv * hd, c.attention_bias, init));
  v_proj_ = &register_module("v_proj", std::make_unique<nn::Linear>(d, kv * hd, c.attention_bias, init));
  o_proj_ = &register_module("o_proj", std::make_unique<nn::Linear>(h * hd, d, c.attention_bias, init));
  if (c.qk_norm) {
    q_norm_ = &register_module("q_norm", std::make_unique<nn::RMSNorm>(hd, c.norm_eps, init));
    k_norm_ = &register_module("k_norm", std::make_unique<nn::RMSNorm>(hd, c.norm_eps, init));
  }
}

Tensor LlamaAttention::forward(const Tensor& x, const RopeTables& rope, const ModelConfig& c, AttentionKernel kernel,
                               bool training) const {
  const int64_t b = x.size(0), t = x.size(1), hd = c.head_size(), h = c.num_attention_heads, kv = c.kv_heads();
  Tensor q = q_proj_->forward(x).view({b, t, h, hd});   // (B, T, H, hd)
  Tensor k = k_proj_->forward(x).view({b, t, kv, hd});  // (B, T, Hkv, hd)
  Tensor v = v_proj_->forward(x).view({b, t, kv, hd});  // (B, T, Hkv, hd)
  if (q_norm_ != nullptr) {
    q = q_norm_->forward(q);
    k = k_norm_->forward(k);
  }
  q = apply_rope(q.transpose(1, 2), rope.cos, rope.sin);  // (B, H, T, hd)
  k = apply_rope(k.transpose(1, 2), rope.cos, rope.sin);  // (B, Hkv, T, hd)
  AttentionOptions opt;
  opt.kernel = kernel;
  opt.dropout_p = training ? c.attention_dropout : 0.0;
  Tensor a = scaled_dot_product_attention(q, k, v.transpose(1, 2), opt);  // (B, H, T, hd)
  return o_proj_->forward(a.transpose(1, 2).reshape({b, t, h * hd}));    // (B, T, C)
}

LlamaDecoderLayer::LlamaDecoderLayer(const ModelConfig& c, int64_t index, const nn::Init& init) {
  input_layernorm_ = &register_module("input_layernorm", std::make_unique<nn::RMSNorm>(c.hidden_size, c.norm_eps, init));
  self_attn_ = &register_module("self_attn", std::make_unique<LlamaAttention>(c, init));
  post_attention_layernorm_ =
      &register_module("post_attention_layernorm", std::make_unique<nn::RMSNorm>(c.hidden_size, c.norm_eps, init));
  if (c.is_moe_layer(index))
    moe_ = &register_module("mlp", std::make_unique<SparseMoeBlock>(c, init));
  else
    mlp_ = &register_module("mlp", std::make_unique<SwiGluMlp>(c.hidden_size, c.intermediate_size, init));
}

std::vector<Tensor> LlamaDecoderLayer::forward(const Tensor& x, const RopeTables& rope, const ModelConfig& c,
                                               AttentionKernel kernel, bool training) const {
  Tensor x1 = add(x, self_attn_->forward(input_layernorm_->forward(x), rope, c, kernel, training));  // (B, T, C)
  Tensor h = post_attention_layernorm_->forward(x1);                                                  // (B, T, C)
  if (moe_ == nullptr) return {add(x1, mlp_->forward(h))};
  RouterStats stats;
  Tensor y = moe_->forward(h, stats);
  return {add(x1, y), stats.prob_sum, stats.topk_counts};
}

Llama::Llama(const ModelConfig& c, const nn::Init& init) : CausalLM(c) {
  Holder& model = register_module("model", std::make_unique<Holder>());
  embed_tokens_ = model.add("embed_tokens", std::make_unique<nn::Embedding>(c.vocab_size, c.hidden_size, init));
  layers_ = model.add("layers", std::make_unique<nn::ModuleList<LlamaDecoderLayer>>());
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) layers_->add(std::make_unique<LlamaDecoderLayer>(c, l, init));
  norm_ = model.add("norm", std::make_unique<nn::RMSNorm>(c.hidden_size, c.norm_eps, init));
  if (!c.tie_word_embeddings)
    lm_head_ = &register_module("lm_head", std::make_unique<nn::Linear>(c.hidden_size, c.vocab_size, false, init));
}

const Tensor& Llama::lm_head_weight() const {
  return lm_head_ != nullptr ? lm_head_->weight() : embed_tokens_->weight();
}

ModelOutput Llama::forward_hidden(const Tensor& ids) const {
  TIDAL_CHECK(ids.dim() == 2, "[", config_.model_type, "] token ids must be (batch, seq), got ", ids.shape());
  const int64_t t = ids.size(1);
  TIDAL_CHECK(t <= config_.max_position_embeddings, "[", config_.model_type, "] sequence length ", t,
              " exceeds max_position_embeddings ", config_.max_position_embeddings);
  const RopeTables rope = rope_tables(t, config_.head_size(), config_.rope_theta, embed_tokens_->weight().dtype(),
                                      ids.device());
  Tensor x = embed_tokens_->forward(ids);  // (B, T, C)
  std::vector<RouterStats> routers;
  for (size_t l = 0; l < layers_->size(); ++l) {
    const LlamaDecoderLayer& layer = (*layers_)[l];
    LayerFn fn = [&layer, rope, this](const std::vector<Tensor>& in) {
      return layer.forward(in[0], rope, config_, attention_kernel(), is_training());
    };
    std::vector<Tensor> out = run_layer(int64_t(l), fn, {x});
    x = out[0];
    if (layer.sparse()) routers.push_back({out[1], out[2], ids.numel()});
  }
  ModelOutput result{norm_->forward(x), Tensor(), Tensor()};
  if (!routers.empty()) result.aux_loss = load_balancing_loss(routers, config_.num_experts);
  return result;
}

}  // namespace tidal::models
