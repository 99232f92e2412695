#include "tidal/models/causal_lm.h"

#include "tidal/memory_scope.h"
#include "tidal/models/gpt2.h"
#include "tidal/models/llama.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/loss.h"
#include "tidal/ops/matmul.h"

namespace tidal::models {

ModelOutput CausalLM::forward(const Tensor& ids) const {
  ModelOutput out = forward_hidden(ids);
  OpScope op("lm_head");
  MemoryScope scope(MemoryCategory::logits);
  out.logits = linear(out.hidden, lm_head_weight());  // (B, T, V)
  return out;
}

std::vector<Tensor> CausalLM::run_layer(int64_t index, const LayerFn& fn, const std::vector<Tensor>& inputs) const {
  LayerScope layer(static_cast<int>(index));
  return runner_ ? runner_(index, fn, inputs) : fn(inputs);
}

void CausalLM::load_hf_state_dict(std::map<std::string, Tensor> state) {
  std::map<std::string, Tensor> mine;
  std::map<std::string, bool> ours;
  for (auto& [name, p] : named_parameters()) ours[name] = true;
  for (auto& [name, t] : state) {
    std::string key = name;
    if (!ours.count(key) && ours.count("transformer." + key)) key = "transformer." + key;  // GPT2Model naming
    const bool buffer = key.size() > 9 && (key.ends_with(".attn.bias") || key.ends_with(".attn.masked_bias"));
    if (buffer) continue;  // GPT-2's causal-mask buffers
    if (key == "lm_head.weight" && config_.tie_word_embeddings) continue;  // a copy of the embedding
    mine[key] = std::move(t);
  }
  load_state_dict(mine, /*strict=*/true);
}

std::unique_ptr<CausalLM> create_model(const ModelConfig& config, const nn::Init& init_in) {
  config.validate();
  nn::Init init = init_in;
  init.std = config.initializer_range;
  if (config.is_gpt2()) return std::make_unique<Gpt2>(config, init);
  return std::make_unique<Llama>(config, init);
}

Tensor causal_lm_loss(const ModelOutput& out, const Tensor& targets, double aux_coef) {
  OpScope op("loss");
  const int64_t v = out.logits.size(-1);
  Tensor loss = cross_entropy(out.logits.reshape({-1, v}), targets.reshape({-1}));
  if (out.aux_loss.defined() && aux_coef != 0.0) loss = add(loss, mul(out.aux_loss, aux_coef));
  return loss;
}

}  // namespace tidal::models
