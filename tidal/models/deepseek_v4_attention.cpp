#include "tidal/models/deepseek_v4_attention.h"

#include "tidal/memory_scope.h"

#include <cmath>
#include <limits>

#include "tidal/autograd/checkpoint.h"
#include "tidal/ops/attention.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/norm.h"
#include "tidal/ops/softmax.h"
#include "tidal/ops/sparse_attention.h"
#include "tidal/ops/view.h"

namespace tidal::models {

Tensor sliding_window_mask(int64_t seq_len, int64_t window, DType dtype, const Device& device) {
  std::vector<double> m(size_t(seq_len * seq_len), -std::numeric_limits<double>::infinity());
  for (int64_t i = 0; i < seq_len; ++i)
    for (int64_t j = std::max<int64_t>(0, i - window + 1); j <= i; ++j) m[size_t(i * seq_len + j)] = 0.0;
  return from_vector(m, {seq_len, seq_len}, dtype).to(device);
}

DeepseekV4Attention::DeepseekV4Attention(const ModelConfig& c, int64_t layer, const nn::Init& init) {
  const int64_t d = c.hidden_size, h = c.num_attention_heads, hd = c.head_size(), q = c.q_lora_rank;
  const int64_t g = c.v4.o_groups, r = c.v4.o_lora_rank;
  q_a_proj_ = &register_module("q_a_proj", std::make_unique<nn::Linear>(d, q, false, init));
  q_a_norm_ = &register_module("q_a_norm", std::make_unique<nn::RMSNorm>(q, c.norm_eps, init));
  q_b_proj_ = &register_module("q_b_proj", std::make_unique<nn::Linear>(q, h * hd, false, init));
  kv_proj_ = &register_module("kv_proj", std::make_unique<nn::Linear>(d, hd, false, init));
  kv_norm_ = &register_module("kv_norm", std::make_unique<nn::RMSNorm>(hd, c.norm_eps, init));
  o_a_proj_ = &register_module("o_a_proj", std::make_unique<nn::Linear>(h * hd / g, g * r, false, init));
  o_b_proj_ = &register_module("o_b_proj", std::make_unique<nn::Linear>(g * r, d, false, init));
  sinks_ = register_parameter("sinks", nn::constant_parameter({h}, 0.0, init));
  if (c.is_heavily_compressed(layer))
    compressor_ = &register_module("compressor", std::make_unique<HcaCompressor>(c, init));
  if (c.is_sparse_compressed(layer)) sparse_ = &register_module("compressor", std::make_unique<CsaCompressor>(c, init));
  o_a_proj_->refuse_lora();  // its weight is read per group, not through its forward
}

Tensor DeepseekV4Attention::composed_core(const std::vector<Tensor>& x, const Tensor& mask,
                                          const Tensor& entries_mask) const {
  const Tensor& q = x[0];  // (B, H, T, hd)
  const int64_t b = q.size(0), heads = q.size(1), t = q.size(2), hd = q.size(3);
  Tensor kv = x[1], keys_mask = mask;  // (B, 1, T, hd), (T, T)
  if (x.size() > 3) {
    kv = cat({kv, x[3]}, 2);  // (B, 1, T + W, hd)
    // HCA's mask is (T, W); CSA's (B, 1, T, W), each sample's own choice.
    keys_mask =
        entries_mask.dim() == 2 ? cat({mask, entries_mask}, 1) : cat({mask.expand({b, 1, t, t}), entries_mask}, 3);
  }
  const int64_t keys = kv.size(2);  // T, or T + W with the compressed entries
  Tensor scores = add(mul(matmul(q, kv.transpose(-1, -2)), 1.0 / std::sqrt(double(hd))), keys_mask);
  Tensor sink = x[2].to(scores.dtype()).view({1, heads, 1, 1}).expand({b, heads, t, 1});  // (B, H, T, 1)
  Tensor probs = softmax(cat({scores, sink}, 3), -1).narrow(3, 0, keys);                  // (B, H, T, keys)
  return matmul(probs, kv);                                                               // (B, H, T, hd)
}

Tensor DeepseekV4Attention::flash_core(const std::vector<Tensor>& x, const ModelConfig& c) const {
  const Tensor& q = x[0];  // (B, H, T, hd)
  const int64_t b = q.size(0), heads = q.size(1), t = q.size(2);
  AttentionOptions window;
  window.window = c.sliding_window;
  const AttentionWithLse a = attention_with_lse(q, x[1], x[1], window);  // the window's keys
  const Tensor a_out = a.out.transpose(1, 2);                            // (B, T, H, hd)
  // The logits of the softmax that merges the parts, (B, T, H, parts) in f32 (f64 for f64): the window's
  // log-sum-exp, HCA's or CSA's, then the sink. A row that sees no entry yet has an entries' log-sum-exp of -inf:
  // weight 0.
  std::vector<Tensor> logits = {a.lse.transpose(1, 2).unsqueeze(-1)};
  Tensor entries_out;   // (B, T, H, hd)
  if (x.size() == 4) {  // HCA: every complete entry, through the flash kernel's compressed keys
    AttentionOptions compressed;
    compressed.key_rate = c.v4.compress_rate_hca;
    const AttentionWithLse e = attention_with_lse(q, x[3], x[3], compressed);
    entries_out = e.out.transpose(1, 2);
    const Tensor lse = masked_fill(e.lse, eq(e.lse, std::numeric_limits<double>::infinity()),
                                   -std::numeric_limits<double>::infinity());  // the flash kernel's +inf
    logits.push_back(lse.transpose(1, 2).unsqueeze(-1));
  } else if (x.size() == 5) {  // CSA: each query's kept entries (x[4] (B, T, k) i32), read by index
    const AttentionWithLse e = sparse_attention_with_lse(q, x[3], x[3], x[4]);
    entries_out = e.out.transpose(1, 2);
    logits.push_back(e.lse.transpose(1, 2).unsqueeze(-1));
  }
  logits.push_back(x[2].to(a.lse.dtype()).view({1, 1, heads, 1}).expand({b, t, heads, 1}));  // the sink
  const Tensor weights = softmax(cat(logits, 3), -1).to(q.dtype());                          // (B, T, H, parts)
  Tensor o = mul(a_out, weights.narrow(3, 0, 1));                                            // (B, T, H, hd)
  if (entries_out.defined()) o = add(o, mul(entries_out, weights.narrow(3, 1, 1)));
  return o.transpose(1, 2);  // (B, H, T, hd)
}

Tensor DeepseekV4Attention::forward(const Tensor& h, const RopeTables& rope, const Tensor& mask, AttentionKernel kernel,
                                    const ModelConfig& c, bool recompute_core, bool recompute_compressed) const {
  ModuleScope scope(name());  // --report-memory: the composed core's tensors under self_attn
  const int64_t b = h.size(0), t = h.size(1), heads = c.num_attention_heads, hd = c.head_size(), r = c.v4.rope_dim;
  const int64_t g = c.v4.o_groups;
  Tensor q_residual = q_a_norm_->forward(q_a_proj_->forward(h));                                  // (B, T, q_lora_rank)
  Tensor q = q_b_proj_->forward(q_residual).view({b, t, heads, hd});                              // (B, T, H, hd)
  q = rotate_tail(rms_norm(q, Tensor(), c.norm_eps), rope, r);                                    // (B, H, T, hd)
  Tensor kv = rotate_tail(kv_norm_->forward(kv_proj_->forward(h)).view({b, t, 1, hd}), rope, r);  // (B, 1, T, hd)

  // {h, q_residual, q, kv, sinks} -> the attention's output (B, H, T, hd): the compressed entries (HCA or CSA) after
  // the window's keys, then the core. A compressed layer under --recompute-csa-attention runs it in one checkpoint:
  // its inputs stay, the rest is recomputed in backward (CSA's choice replayed, deepseek_v4_sparse.h); otherwise
  // core_attn checkpoints the core alone.
  const bool region = recompute_compressed && (compressor_ != nullptr || sparse_ != nullptr);
  const bool composed = kernel == AttentionKernel::eager;
  auto attend = [this, mask, rope, &c, region, recompute_core, composed](const std::vector<Tensor>& in) {
    CompressedEntries e;
    if (compressor_ != nullptr) e = compressor_->forward(in[0], rope, c, composed);
    if (sparse_ != nullptr) e = sparse_->forward(in[0], in[1], rope, c, composed);
    std::vector<Tensor> x = {in[2], in[3], in[4]};  // {q, kv, sinks, [entries, [kept: the flash core's gather]]}
    if (e.kv.defined()) x.push_back(e.kv);
    if (e.kv.defined() && e.kept.defined() && !composed) x.push_back(e.kept);
    auto core = [this, &c, composed, mask, entries_mask = e.mask](const std::vector<Tensor>& x) {
      return std::vector<Tensor>{composed ? composed_core(x, mask, entries_mask) : flash_core(x, c)};
    };
    return recompute_core && !region ? autograd::checkpoint(core, x) : core(x);
  };
  const std::vector<Tensor> in = {h, q_residual, q, kv, sinks_};
  Tensor o = region ? autograd::checkpoint(attend, in)[0] : attend(in)[0];  // (B, H, T, hd)

  // The rotary channels rotated back by their position, in transformers' interleaved order again.
  Tensor back = apply_rope(o.narrow(3, hd - r, r), rope.cos, neg(rope.sin));  // (B, H, T, r)
  o = cat({o.narrow(3, 0, hd - r), interleave(back)}, 3).transpose(1, 2);     // (B, T, H, hd)
  Tensor grouped = o.reshape({b * t, g, heads * hd / g}).transpose(0, 1);     // (G, BT, H hd / G)
  const Tensor& w = o_a_proj_->weight();                                      // (G R, H hd / G)
  Tensor wg = w.view({g, w.size(0) / g, w.size(1)}).transpose(1, 2);          // (G, H hd / G, R)
  Tensor y = matmul(grouped, wg).transpose(0, 1).reshape({b, t, w.size(0)});  // (B, T, G R)
  return o_b_proj_->forward(y);                                               // (B, T, C)
}

}  // namespace tidal::models
