#include "tidal/models/gpt2.h"

#include <cmath>

#include "tidal/autograd/checkpoint.h"
#include "tidal/autograd/checkpoint_without_output.h"
#include "tidal/memory_scope.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/random.h"
#include "tidal/ops/view.h"

namespace tidal::models {
Gpt2Block::Gpt2Block(const ModelConfig& c, const nn::Init& init) {
  const int64_t d = c.hidden_size;
  const double proj_std = c.initializer_range / std::sqrt(2.0 * double(c.num_hidden_layers));
  ln_1_ = &register_module("ln_1", std::make_unique<nn::LayerNorm>(d, c.norm_eps, init));
  nn::ModuleDict& attn = register_module("attn", std::make_unique<nn::ModuleDict>());
  attn_ = &attn;
  c_attn_ = attn.add("c_attn", std::make_unique<nn::Conv1D>(d, 3 * d, init));
  attn_proj_ = attn.add("c_proj", std::make_unique<nn::Conv1D>(d, d, init, proj_std));
  ln_2_ = &register_module("ln_2", std::make_unique<nn::LayerNorm>(d, c.norm_eps, init));
  nn::ModuleDict& mlp = register_module("mlp", std::make_unique<nn::ModuleDict>());
  mlp_ = &mlp;
  c_fc_ = mlp.add("c_fc", std::make_unique<nn::Conv1D>(d, c.intermediate_size, init));
  mlp_proj_ = mlp.add("c_proj", std::make_unique<nn::Conv1D>(c.intermediate_size, d, init, proj_std));
}

Tensor Gpt2Block::forward(const Tensor& x, const ModelConfig& c, const CoreAttention& attn, bool training,
                          const LayerRecompute& rc) const {
  const int64_t b = x.size(0), t = x.size(1), d = c.hidden_size, heads = c.num_attention_heads, hd = d / heads;
  // ln_1 -> c_attn; with norm recompute ln_1's output is freed once c_attn saved it.
  Tensor qkv_all = autograd::with_discarded_outputs(
      rc.norm, [this](const std::vector<Tensor>& in) { return std::vector<Tensor>{ln_1_->forward(in[0])}; }, {x},
      [this](const std::vector<Tensor>& h) { return std::vector<Tensor>{c_attn_->forward(h[0])}; })[0];  // (B, T, 3C)
  std::vector<Tensor> qkv = split(qkv_all, {d, d, d}, -1);                                     // 3 x (B, T, C)
  auto heads_of = [&](const Tensor& y) { return y.view({b, t, heads, hd}).transpose(1, 2); };  // (B, H, T, hd)
  AttentionOptions opt;
  opt.dropout_p = training ? c.attention_dropout : 0.0;
  auto core = [opt, attn, module = attn_->name()](const std::vector<Tensor>& in) {
    ModuleScope scope(module);
    return std::vector<Tensor>{attn(in[0], in[1], in[2], opt)};
  };
  const std::vector<Tensor> qkv_heads = {heads_of(qkv[0]), heads_of(qkv[1]), heads_of(qkv[2])};
  // Selective recompute of the core attention; the flash kernel keeps no (T, T) tensor to drop.
  Tensor a = rc.core_attn && attn.kernel == AttentionKernel::eager ? autograd::checkpoint(core, qkv_heads)[0]
                                                                   : core(qkv_heads)[0];  // (B, H, T, hd)
  Tensor attn_out = attn_proj_->forward(a.transpose(1, 2).reshape({b, t, d}));            // (B, T, C)
  Tensor x1 = add(x, attn.dropout(attn_out, c.hidden_dropout, training));
  const GeluApprox approx = c.hidden_act == "gelu" ? GeluApprox::none : GeluApprox::tanh;
  ModuleScope mlp_scope(mlp_->name());  // the GELU's saved input and output
  auto ln2 = [this](const std::vector<Tensor>& in) { return std::vector<Tensor>{ln_2_->forward(in[0])}; };
  Tensor m;
  if (rc.mlp) {  // the whole MLP in one checkpoint (ln_2's consumer)
    m = autograd::with_discarded_outputs(rc.norm, ln2, {x1}, [this, approx](const std::vector<Tensor>& h) {
      return autograd::checkpoint(
          [this, approx](const std::vector<Tensor>& hh) {
            return std::vector<Tensor>{mlp_proj_->forward(gelu(c_fc_->forward(hh[0]), approx))};
          },
          h);
    })[0];  // (B, T, C)
  } else {  // c_fc consumes ln_2's output; c_proj the activation's
    Tensor f = autograd::with_discarded_outputs(rc.norm, ln2, {x1}, [this](const std::vector<Tensor>& h) {
      return std::vector<Tensor>{c_fc_->forward(h[0])};
    })[0];
    m = autograd::with_discarded_outputs(
        rc.activation, [approx](const std::vector<Tensor>& in) { return std::vector<Tensor>{gelu(in[0], approx)}; },
        {f}, [this](const std::vector<Tensor>& g) { return std::vector<Tensor>{mlp_proj_->forward(g[0])}; })[0];
  }
  // (the scope also covers the residual dropout's mask below: it belongs to the MLP's output)
  return add(x1, attn.dropout(m, c.hidden_dropout, training));
}

Gpt2::Gpt2(const ModelConfig& c, const nn::Init& init) : CausalLM(c) {
  nn::ModuleDict& tr = register_module("transformer", std::make_unique<nn::ModuleDict>());
  wte_ = tr.add("wte", std::make_unique<nn::Embedding>(c.vocab_size, c.hidden_size, init));
  wpe_ = tr.add("wpe", std::make_unique<nn::Embedding>(c.max_position_embeddings, c.hidden_size, init));
  h_ = tr.add("h", std::make_unique<nn::ModuleList<Gpt2Block>>());
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) h_->add(std::make_unique<Gpt2Block>(c, init));
  ln_f_ = tr.add("ln_f", std::make_unique<nn::LayerNorm>(c.hidden_size, c.norm_eps, init));
}

ModelOutput Gpt2::hidden_states(const Tensor& ids, const DocumentLayout& docs,
                                const MtpIds& /*mtp: none (ModelConfig::validate)*/) const {
  const CoreAttention attn = core_attention(docs.starts);
  checked_sequence_length(ids, attn);
  Tensor pos = docs.positions;  // (B, T) packed documents' own positions, or (T) the tokens' global positions
  if (!pos.defined()) {
    std::vector<Tensor> runs;
    for (const auto& [start, length] : attn.positions(ids.size(1)))
      runs.push_back(arange(start, start + length, 1, DType::i64, ids.device()));
    pos = runs.size() == 1 ? runs[0] : cat(runs, 0);
  }
  Tensor x =
      attn.dropout(add(wte_->forward(ids), wpe_->forward(pos)), config_.hidden_dropout, is_training());  // (B, T, C)
  x = run_layers(
      std::move(x),  // the layers own it: offload may release it once block 0 is done
      [this, attn](int64_t l, const std::vector<Tensor>& in) {
        return std::vector<Tensor>{(*h_)[size_t(l)].forward(in[0], config_, attn, is_training(), recompute_of(l))};
      },
      nullptr);
  return {ln_f_->forward(x), Tensor(), Tensor(), {}};
}

}  // namespace tidal::models
