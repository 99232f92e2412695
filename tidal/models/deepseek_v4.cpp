#include "tidal/models/deepseek_v4.h"

#include "tidal/memory_scope.h"

#include "tidal/autograd/checkpoint.h"
#include "tidal/autograd/checkpoint_without_output.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/ops/view.h"

namespace tidal::models {

HyperConnectionConfig hyper_connection_config(const ModelConfig& c) {
  HyperConnectionConfig h;
  h.streams = c.v4.hc_mult;
  h.hidden = c.hidden_size;
  h.sinkhorn_iters = c.v4.hc_sinkhorn_iters;
  h.eps = c.v4.hc_eps;
  h.norm_eps = c.norm_eps;
  return h;
}

DeepseekV4DecoderLayer::DeepseekV4DecoderLayer(const ModelConfig& c, int64_t index, const nn::Init& init,
                                               std::shared_ptr<dist::Communicator> experts) {
  self_attn_ = &register_module("self_attn", std::make_unique<DeepseekV4Attention>(c, index, init));
  mlp_ = &register_module("mlp", std::make_unique<DeepseekV4Moe>(c, index, init, std::move(experts)));
  input_layernorm_ =
      &register_module("input_layernorm", std::make_unique<nn::RMSNorm>(c.hidden_size, c.norm_eps, init));
  post_attention_layernorm_ =
      &register_module("post_attention_layernorm", std::make_unique<nn::RMSNorm>(c.hidden_size, c.norm_eps, init));
  attn_hc_ = &register_module("attn_hc", std::make_unique<HyperConnection>(hyper_connection_config(c), init));
  ffn_hc_ = &register_module("ffn_hc", std::make_unique<HyperConnection>(hyper_connection_config(c), init));
}

Tensor DeepseekV4DecoderLayer::forward(const Tensor& streams, const Tensor& ids, const RopeTables& rope,
                                       const Tensor& mask, AttentionKernel kernel, const ModelConfig& c,
                                       const LayerRecompute& rc) const {
  ModuleScope scope(name());  // what no submodule names (the streams' expansion) under the layer
  // --mhc-recompute (Note [mHC recompute] in hyper_connection.h): the two pre mappings in checkpoints, the attention's
  // post mapping output-discarding (its output x, the mid-layer streams, comes back before the MLP part's backward).
  const HyperMappings a = attn_hc_->collapse(streams, rc.mhc);  // streams (B, T, N, C)
  const Tensor attn_out = self_attn_->forward(input_layernorm_->forward(a.collapsed), rope, mask, kernel, c,
                                              rc.core_attn, rc.csa_attention);  // (B, T, C)
  autograd::CheckpointWithoutOutput expansion;                                  // the attention's post mapping
  auto expand = [](const std::vector<Tensor>& in) {                             // {post, comb, streams, block_out}
    return std::vector<Tensor>{HyperConnection::expand({in[0], in[1], Tensor()}, in[2], in[3])};
  };
  const std::vector<Tensor> expand_in = {a.post, a.comb, streams, attn_out};
  const bool discard = rc.mhc && autograd::grad_enabled();
  const Tensor x = discard ? expansion.run(expand, expand_in)[0] : expand(expand_in)[0];  // (B, T, N, C)
  const HyperMappings m = ffn_hc_->collapse(x, rc.mhc);
  auto moe = [this, ids](const std::vector<Tensor>& in) { return std::vector<Tensor>{mlp_->forward(in[0], ids)}; };
  const std::vector<Tensor> h = {post_attention_layernorm_->forward(m.collapsed)};                 // (B, T, C)
  Tensor y = HyperConnection::expand(m, x, rc.moe ? autograd::checkpoint(moe, h)[0] : moe(h)[0]);  // (B, T, N, C)
  if (discard) {  // x's consumers (the MLP's mappings and y's mix) saved it
    expansion.discard_outputs();
    expansion.recompute_before_backward_of(y);
  }
  return y;
}

DeepseekV4::DeepseekV4(const ModelConfig& c, const nn::Init& init, std::shared_ptr<dist::Communicator> experts)
    : CausalLM(c, experts) {
  nn::ModuleDict& model = register_module("model", std::make_unique<nn::ModuleDict>());
  embed_tokens_ =
      model.add("embed_tokens", std::make_unique<nn::Embedding>(c.vocab_size, c.hidden_size, init, c.pad_token_id));
  layers_ = model.add("layers", std::make_unique<nn::ModuleList<DeepseekV4DecoderLayer>>());
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    layers_->add(std::make_unique<DeepseekV4DecoderLayer>(c, l, init, experts));
  norm_ = model.add("norm", std::make_unique<nn::RMSNorm>(c.hidden_size, c.norm_eps, init));
  hc_head_ = model.add("hc_head", std::make_unique<HyperHead>(hyper_connection_config(c), init));
  if (!c.tie_word_embeddings) {
    lm_head_ = &register_module("lm_head", std::make_unique<nn::Linear>(c.hidden_size, c.vocab_size, false, init));
    lm_head_->refuse_lora();  // the loss reads its weight (lm_head_weight())
  }
}

void DeepseekV4::update_expert_biases(dist::Communicator& group) const {
  for (size_t l = 0; l < layers_->size(); ++l) (*layers_)[l].mlp().update_expert_bias(group);
}

const Tensor& DeepseekV4::lm_head_weight() const {
  return lm_head_ != nullptr ? lm_head_->weight() : embed_tokens_->weight();
}

ModelOutput DeepseekV4::hidden_states(const Tensor& ids, const DocumentLayout& docs, const MtpIds& mtp) const {
  const CoreAttention attn = core_attention(docs.starts);
  TIDAL_CHECK(!attn.context_parallel(), "[deepseek_v4] context parallelism is not supported for deepseek_v4 yet");
  TIDAL_CHECK(!docs.starts.defined() && !docs.positions.defined(),
              "[deepseek_v4] packed documents (--reset-attention-mask, --reset-position-ids) are not supported for "
              "deepseek_v4 yet");
  TIDAL_ASSERT(mtp.empty(), "deepseek_v4 has no MTP depths (ModelConfig::validate refuses --mtp-num-layers)");
  const int64_t t = checked_sequence_length(ids, attn);
  const DType dtype = embed_tokens_->weight().dtype();
  const RopeTables rope = rope_tables(t, config_.v4.rope_dim, config_.rope_theta, dtype, ids.device());
  // The compressed layers': their base and scaling (yarn on the published checkpoints).
  const RopeTables compress_rope = rope_tables(
      t, rope_frequencies(config_.v4.rope_dim, config_.v4.compress_rope_theta, config_.v4.compress_rope_scaling, t),
      dtype, ids.device());
  const AttentionKernel kernel = attn.kernel;
  const Tensor mask = kernel == AttentionKernel::eager
                          ? sliding_window_mask(t, config_.sliding_window, dtype, ids.device())
                          : Tensor();                                                     // (T, T) for the eager core
  Tensor x = embed_tokens_->forward(ids);                                                 // (B, T, C)
  Tensor streams = x.unsqueeze(2).expand({-1, -1, config_.v4.hc_mult, -1}).contiguous();  // (B, T, N, C)
  streams = run_layers(
      std::move(streams),
      [this, ids, rope, compress_rope, mask, kernel](int64_t l, const std::vector<Tensor>& in) {
        const RopeTables& r = config_.is_compressed(l) ? compress_rope : rope;  // the layer's RoPE
        return std::vector<Tensor>{
            (*layers_)[size_t(l)].forward(in[0], ids, r, mask, kernel, config_, recompute_of(l))};
      },
      nullptr);
  return {norm_->forward(hc_head_->forward(streams)), Tensor(), Tensor(), {}};
}

}  // namespace tidal::models
