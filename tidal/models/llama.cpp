#include "tidal/models/llama.h"

#include "tidal/autograd/checkpoint.h"
#include "tidal/autograd/checkpoint_without_output.h"
#include "tidal/memory_scope.h"
#include "tidal/models/mla.h"
#include "tidal/models/mtp.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/random.h"
#include "tidal/ops/view.h"

namespace tidal::models {
LlamaAttention::LlamaAttention(const ModelConfig& c, int64_t layer, const nn::Init& init)
    : window_(c.attention_window(layer)) {
  const int64_t d = c.hidden_size, hd = c.head_size(), h = c.num_attention_heads, kv = c.kv_heads();
  const bool qkv_bias = c.attention_bias || c.qkv_bias;
  q_proj_ = &register_module("q_proj", std::make_unique<nn::Linear>(d, h * hd, qkv_bias, init));
  k_proj_ = &register_module("k_proj", std::make_unique<nn::Linear>(d, kv * hd, qkv_bias, init));
  v_proj_ = &register_module("v_proj", std::make_unique<nn::Linear>(d, kv * hd, qkv_bias, init));
  o_proj_ = &register_module("o_proj", std::make_unique<nn::Linear>(h * hd, d, c.attention_bias, init));
  if (c.qk_norm) {
    const double offset = c.is_gemma3() ? 1.0 : 0.0;  // Gemma3RMSNorm: (1 + w)
    q_norm_ = &register_module("q_norm", std::make_unique<nn::RMSNorm>(hd, c.norm_eps, init, offset));
    k_norm_ = &register_module("k_norm", std::make_unique<nn::RMSNorm>(hd, c.norm_eps, init, offset));
  }
}

std::vector<Tensor> LlamaAttention::project(const Tensor& h, const ModelConfig& c) const {
  const int64_t b = h.size(0), t = h.size(1), hd = c.head_size();
  return {q_proj_->forward(h).view({b, t, c.num_attention_heads, hd}),  // (B, T, H, hd)
          k_proj_->forward(h).view({b, t, c.kv_heads(), hd}),           // (B, T, Hkv, hd)
          v_proj_->forward(h).view({b, t, c.kv_heads(), hd})};          // (B, T, Hkv, hd)
}

Tensor LlamaAttention::attend(const std::vector<Tensor>& qkv, const RopeTables& rope, const ModelConfig& c,
                              const CoreAttention& attn, bool training, const LayerRecompute& rc) const {
  const int64_t b = qkv[0].size(0), t = qkv[0].size(1), h = c.num_attention_heads, hd = c.head_size();
  Tensor q = qkv[0], k = qkv[1];
  if (q_norm_ != nullptr) {
    q = q_norm_->forward(q);
    k = k_norm_->forward(k);
  }
  q = apply_rope(q.transpose(1, 2), rope.cos, rope.sin);  // (B, H, T, hd)
  k = apply_rope(k.transpose(1, 2), rope.cos, rope.sin);  // (B, Hkv, T, hd)
  AttentionOptions opt;
  opt.dropout_p = training ? c.attention_dropout : 0.0;
  opt.window = window_;             // sliding layers (mistral, qwen2/qwen3 with use_sliding_window, gemma3)
  opt.scale = c.attention_scale();  // gemma3: query_pre_attn_scalar^-1/2
  Tensor a = run_core_attention({q, k, qkv[2].transpose(1, 2)}, opt, attn, rc.core_attn, name());  // (B, H, T, hd)
  return o_proj_->forward(a.transpose(1, 2).reshape({b, t, h * hd}));                              // (B, T, C)
}

Tensor run_core_attention(const std::vector<Tensor>& qkv, const AttentionOptions& opt, const CoreAttention& attn,
                          bool recompute_core, const char* module) {
  auto core = [opt, attn, module](const std::vector<Tensor>& in) {
    ModuleScope scope(module);
    return std::vector<Tensor>{attn(in[0], in[1], in[2], opt)};
  };
  // Selective recompute of the core attention; the flash kernel keeps no (T, T) tensor to drop.
  return recompute_core && attn.kernel == AttentionKernel::eager ? autograd::checkpoint(core, qkv)[0] : core(qkv)[0];
}

LlamaDecoderLayer::LlamaDecoderLayer(const ModelConfig& c, int64_t index, const nn::Init& init,
                                     const std::shared_ptr<dist::Communicator>& experts) {
  input_layernorm_ =
      &register_module("input_layernorm", std::make_unique<nn::RMSNorm>(c.hidden_size, c.norm_eps, init));
  if (c.is_mla())
    self_attn_ = &register_module("self_attn", std::make_unique<MlaAttention>(c, init));
  else
    self_attn_ = &register_module("self_attn", std::make_unique<LlamaAttention>(c, index, init));
  post_attention_layernorm_ =
      &register_module("post_attention_layernorm", std::make_unique<nn::RMSNorm>(c.hidden_size, c.norm_eps, init));
  if (c.is_moe_layer(index))
    moe_ = &register_module("mlp", std::make_unique<SparseMoeBlock>(c, init, experts));
  else
    mlp_ = &register_module("mlp", std::make_unique<SwiGluMlp>(c.hidden_size, c.intermediate_size, init));
}

std::vector<Tensor> LlamaDecoderLayer::forward(const Tensor& x, const RopeTables& rope, const ModelConfig& c,
                                               const CoreAttention& attn, bool training,
                                               const LayerRecompute& rc) const {
  // input_layernorm -> q/k/v projections; with norm recompute the norm's output is freed once the
  // projections saved it, and comes back before the first of their backwards.
  std::vector<Tensor> qkv = autograd::with_discarded_outputs(
      rc.norm, [this](const std::vector<Tensor>& in) { return std::vector<Tensor>{input_layernorm_->forward(in[0])}; },
      {x}, [this, &c](const std::vector<Tensor>& h) { return self_attn_->project(h[0], c); });
  Tensor x1 = add(x, self_attn_->attend(qkv, rope, c, attn, training, rc));  // (B, T, C)
  auto norm2 = [this](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{post_attention_layernorm_->forward(in[0])};
  };
  if (moe_ == nullptr && rc.mlp) {  // the whole MLP in one checkpoint (the norm's consumer)
    Tensor m = autograd::with_discarded_outputs(rc.norm, norm2, {x1}, [this](const std::vector<Tensor>& h) {
      return autograd::checkpoint(
          [this](const std::vector<Tensor>& hh) { return std::vector<Tensor>{mlp_->forward(hh[0])}; }, h);
    })[0];  // (B, T, C)
    return {add(x1, m)};
  }
  if (moe_ == nullptr) {  // gate_proj and up_proj consume the norm's output
    std::vector<Tensor> gate_up = autograd::with_discarded_outputs(
        rc.norm, norm2, {x1}, [this](const std::vector<Tensor>& h) { return mlp_->project(h[0]); });
    return {add(x1, mlp_->finish(gate_up, rc.activation))};
  }
  // Sparse layer: the block returns {y, router prob_sum, top-k counts}.
  auto block = [this, recompute_act = rc.moe_act](const std::vector<Tensor>& h) {
    RouterStats stats;
    Tensor y = moe_->forward(h[0], stats, recompute_act);
    return std::vector<Tensor>{y, stats.prob_sum, stats.topk_counts};
  };
  std::vector<Tensor> out = autograd::with_discarded_outputs(rc.norm, norm2, {x1}, [&](const std::vector<Tensor>& h) {
    return rc.moe ? autograd::checkpoint(block, h) : block(h);
  });
  return {add(x1, out[0]), out[1], out[2]};
}

RopeTables rope_at_positions(const CoreAttention& attn, int64_t local_len, const RopeFrequencies& freqs, DType dtype,
                             const Device& device, const Tensor& positions) {
  if (positions.defined())  // packed documents: each token's position in its document, < the sequence's length
    return rope_tables_at(rope_tables(attn.sequence_length(local_len), freqs, dtype, device), positions);
  RopeTables rope;
  for (const auto& [start, length] : attn.positions(local_len)) {
    RopeTables run = rope_tables(length, freqs, dtype, device, start);
    rope = rope.cos.defined() ? RopeTables{cat({rope.cos, run.cos}, 0), cat({rope.sin, run.sin}, 0)} : run;
  }
  return rope;
}

Llama::Llama(const ModelConfig& c, const nn::Init& init, std::shared_ptr<dist::Communicator> experts)
    : CausalLM(c, experts) {
  nn::ModuleDict& model = register_module("model", std::make_unique<nn::ModuleDict>());
  embed_tokens_ =
      model.add("embed_tokens", std::make_unique<nn::Embedding>(c.vocab_size, c.hidden_size, init, c.pad_token_id));
  layers_ = model.add("layers", std::make_unique<nn::ModuleList<LlamaDecoderLayer>>());
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    layers_->add(std::make_unique<LlamaDecoderLayer>(c, l, init, experts));
  // The MTP depths follow the layers, under their names (model.layers.<L + k - 1>); run_layers never runs them.
  for (int64_t k = 1; k <= c.mtp_num_layers; ++k)
    mtp_.push_back(&static_cast<MtpLayer&>(layers_->add(std::make_unique<MtpLayer>(c, k, init, experts))));
  norm_ = model.add("norm", std::make_unique<nn::RMSNorm>(c.hidden_size, c.norm_eps, init));
  if (!c.tie_word_embeddings) {
    lm_head_ = &register_module("lm_head", std::make_unique<nn::Linear>(c.hidden_size, c.vocab_size, false, init));
    lm_head_->refuse_lora();  // the loss reads its weight (lm_head_weight())
  }
}

std::vector<Router*> Llama::routers() const {
  std::vector<Router*> out;
  for (size_t l = 0; l < layers_->size(); ++l)
    if (Router* r = (*layers_)[l].router()) out.push_back(r);
  return out;
}

const Tensor& Llama::lm_head_weight() const {
  return lm_head_ != nullptr ? lm_head_->weight() : embed_tokens_->weight();
}

ModelOutput Llama::hidden_states(const Tensor& ids, const DocumentLayout& docs, const MtpIds& mtp) const {
  const CoreAttention attn = core_attention(docs.starts);
  const int64_t t = checked_sequence_length(ids, attn);
  // The rope type's scaling, for a run of t.
  const RopeTables rope = rope_at_positions(attn, ids.size(1), config_.rope_frequencies(t),
                                            embed_tokens_->weight().dtype(), ids.device(), docs.positions);
  Tensor x = embed_tokens_->forward(ids);  // (B, T, C)
  std::vector<std::vector<Tensor>> extras;
  x = run_layers(
      std::move(x),  // the layers own it: offload may release it once block 0 is done
      [this, rope, attn](int64_t l, const std::vector<Tensor>& in) {
        return (*layers_)[size_t(l)].forward(in[0], rope, config_, attn, is_training(), recompute_of(l));
      },
      &extras);
  ModelOutput result{norm_->forward(x), Tensor(), Tensor(), {}};
  if (!mtp.empty()) result.mtp_hidden = mtp_hidden_states(result.hidden, mtp, rope, attn, &extras);
  std::vector<RouterStats> routers;
  for (const std::vector<Tensor>& e : extras)
    if (e.size() == 2) routers.push_back({e[0], e[1], ids.numel()});
  // No auxiliary loss where its coefficient is 0 (DeepSeek-V3: the correction bias balances the experts).
  if (!routers.empty() && config_.router_aux_loss_coef != 0)
    result.aux_loss = load_balancing_loss(routers, config_.num_experts, context_parallel());
  return result;
}

std::vector<Tensor> Llama::mtp_hidden_states(const Tensor& hidden, const MtpIds& ids, const RopeTables& rope,
                                             const CoreAttention& attn,
                                             std::vector<std::vector<Tensor>>* extras) const {
  // Each depth under the last layer's recompute plan: full recompute checkpoints the whole depth (Megatron's
  // MTP recompute), the selective modules apply within its decoder layer.
  const LayerRecompute& rc = recompute_of(config_.num_hidden_layers - 1);
  std::vector<Tensor> out;
  Tensor h = hidden;  // (B, T, C): the main model's final hidden states feed depth 1
  for (size_t k = 0; k < mtp_.size(); ++k) {
    ModuleScope scope(mtp_[k]->name());
    const Tensor embedded = embed_tokens_->forward(ids[k]);  // (B, T, C)
    auto depth = [this, k, rope, attn, rc](const std::vector<Tensor>& in) {
      return mtp_[k]->forward(in[0], in[1], rope, config_, attn, is_training(), rc);
    };
    std::vector<Tensor> o = rc.full ? autograd::checkpoint(depth, {h, embedded}) : depth({h, embedded});
    h = o[0];
    out.push_back(h);
    if (o.size() == 3) extras->push_back({o[1], o[2]});  // a sparse depth's router statistics
  }
  return out;
}

}  // namespace tidal::models
