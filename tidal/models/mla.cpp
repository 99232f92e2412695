#include "tidal/models/mla.h"

#include "tidal/autograd/checkpoint_without_output.h"
#include "tidal/ops/view.h"

namespace tidal::models {
namespace {

constexpr double kLatentNormEps = 1e-6;  // DeepseekV3RMSNorm(q_lora_rank / kv_lora_rank): its default eps

// x (B, T, H, R) rotary dims -> (B, H, T, R) rotated: interleaved pairs de-interleaved first (a copy).
Tensor rotate(const Tensor& x, const RopeTables& rope, bool interleave) {
  Tensor r = x;
  if (interleave) {
    const int64_t b = x.size(0), t = x.size(1), h = x.size(2), d = x.size(3);
    r = x.reshape({b, t, h, d / 2, 2}).transpose(3, 4).reshape({b, t, h, d});  // (x0, x2, ..., x1, x3, ...)
  }
  return apply_rope(r.transpose(1, 2), rope.cos, rope.sin);  // (B, H, T, R)
}

}  // namespace

MlaAttention::MlaAttention(const ModelConfig& c, const nn::Init& init) {
  const int64_t d = c.hidden_size, h = c.num_attention_heads, qk = c.qk_head_size();
  const bool bias = c.attention_bias;
  if (c.q_lora_rank > 0) {
    q_a_proj_ = &register_module("q_a_proj", std::make_unique<nn::Linear>(d, c.q_lora_rank, bias, init));
    q_a_layernorm_ =
        &register_module("q_a_layernorm", std::make_unique<nn::RMSNorm>(c.q_lora_rank, kLatentNormEps, init));
    q_b_proj_ = &register_module("q_b_proj", std::make_unique<nn::Linear>(c.q_lora_rank, h * qk, false, init));
  } else {
    q_proj_ = &register_module("q_proj", std::make_unique<nn::Linear>(d, h * qk, false, init));
  }
  kv_a_proj_with_mqa_ = &register_module(
      "kv_a_proj_with_mqa", std::make_unique<nn::Linear>(d, c.kv_lora_rank + c.qk_rope_head_dim, bias, init));
  kv_a_layernorm_ =
      &register_module("kv_a_layernorm", std::make_unique<nn::RMSNorm>(c.kv_lora_rank, kLatentNormEps, init));
  kv_b_proj_ = &register_module(
      "kv_b_proj", std::make_unique<nn::Linear>(c.kv_lora_rank, h * (c.qk_nope_head_dim + c.v_head_dim), false, init));
  o_proj_ = &register_module("o_proj", std::make_unique<nn::Linear>(h * c.v_head_dim, d, bias, init));
}

std::vector<Tensor> MlaAttention::project(const Tensor& h, const ModelConfig&) const {
  return {q_proj_ != nullptr ? q_proj_->forward(h) : q_a_proj_->forward(h),  // (B, T, H * qk) or (B, T, q_lora)
          kv_a_proj_with_mqa_->forward(h)};                                  // (B, T, kv_lora + rope)
}

std::vector<Tensor> MlaAttention::up(const std::vector<Tensor>& projected, const RopeTables& rope,
                                     const ModelConfig& c) const {
  const int64_t b = projected[1].size(0), t = projected[1].size(1), h = c.num_attention_heads;
  const int64_t nope = c.qk_nope_head_dim, r = c.qk_rope_head_dim;
  Tensor q = q_proj_ != nullptr ? projected[0] : q_b_proj_->forward(q_a_layernorm_->forward(projected[0]));
  q = q.view({b, t, h, nope + r});                                              // (B, T, H, qk)
  Tensor latent = projected[1].narrow(2, 0, c.kv_lora_rank);                    // (B, T, kv_lora)
  Tensor k_rot = projected[1].narrow(2, c.kv_lora_rank, r).view({b, t, 1, r});  // (B, T, 1, rope)
  Tensor kv =
      kv_b_proj_->forward(kv_a_layernorm_->forward(latent)).view({b, t, h, nope + c.v_head_dim});  // (B, T, H, nope+v)
  Tensor k_shared = rotate(k_rot, rope, c.rope_interleave);                                        // (B, 1, T, rope)
  Tensor query = cat({q.narrow(3, 0, nope).transpose(1, 2), rotate(q.narrow(3, nope, r), rope, c.rope_interleave)},
                     3);                                                                        // (B, H, T, qk)
  Tensor key = cat({kv.narrow(3, 0, nope).transpose(1, 2), k_shared.expand({b, h, t, r})}, 3);  // (B, H, T, qk)
  return {query, key, kv};
}

Tensor MlaAttention::attend(const std::vector<Tensor>& projected, const RopeTables& rope, const ModelConfig& c,
                            const CoreAttention& attn, bool training, const LayerRecompute& rc) const {
  const int64_t b = projected[1].size(0), t = projected[1].size(1), h = c.num_attention_heads, dv = c.v_head_dim;
  AttentionOptions opt;
  opt.dropout_p = training ? c.attention_dropout : 0.0;
  opt.scale = c.attention_scale();  // 0: qk^-1/2; yarn's mscale_all_dim squared on top
  // The up-projections run again in backward under mla_up_proj: they keep the tables (a copy of two
  // handles) and the config (the model's, which outlives its backward).
  auto up_fn = [this, rope, &c](const std::vector<Tensor>& in) { return up(in, rope, c); };
  auto consume = [&](const std::vector<Tensor>& qkv) {
    const Tensor value = qkv[2].narrow(3, c.qk_nope_head_dim, dv).transpose(1, 2);            // (B, H, T, v)
    Tensor a = run_core_attention({qkv[0], qkv[1], value}, opt, attn, rc.core_attn, name());  // (B, H, T, v)
    return std::vector<Tensor>{o_proj_->forward(a.transpose(1, 2).reshape({b, t, h * dv}))};  // (B, T, C)
  };
  return autograd::with_discarded_outputs(rc.mla_up_proj, up_fn, {projected[0], projected[1]}, consume)[0];
}

}  // namespace tidal::models
