#pragma once
// The small models the memory-feature tests train: a preset cut to `layers` layers, a dense layer 1
// between sparse ones for MoE, dropout on for GPT-2 (so RNG replay is exercised); parameters of
// `dtype` (bf16: --bf16's model, the f32 draws rounded).
#include <memory>

#include "tidal/models/causal_lm.h"
#include "tidal/ops/random.h"

namespace tidal::testing {

inline std::unique_ptr<models::CausalLM> make_test_model(const char* preset_name, int64_t layers,
                                                         AttentionKernel kernel, DType dtype = DType::f32) {
  models::ModelConfig c = models::preset(preset_name);
  c.set_num_layers(layers);
  c.mlp_only_layers = c.is_moe() ? std::vector<int64_t>{1} : std::vector<int64_t>{};
  if (c.is_gpt2()) c.hidden_dropout = c.attention_dropout = 0.1;
  manual_seed(1);
  nn::Init init;
  init.dtype = dtype;
  auto model = models::create_model(c, init);
  model->set_attention_kernel(kernel);
  return model;
}

}  // namespace tidal::testing
