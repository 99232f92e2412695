#pragma once
// The small models the memory-feature tests train: a preset cut to `layers` layers, a dense layer 1
// between sparse ones for MoE, dropout on for GPT-2 (so RNG replay is exercised); parameters of
// `dtype` (bf16: --bf16's model, the f32 draws rounded).
#include <memory>

#include "tidal/models/causal_lm.h"
#include "tidal/ops/random.h"

namespace tidal::testing {

// A model of `c` whose parameters of `dtype` are drawn after manual_seed(seed), weights normal(0, std) (bf16:
// --bf16's model, the f32 draws rounded).
inline std::unique_ptr<models::CausalLM> seeded_model(const models::ModelConfig& c, DType dtype, uint64_t seed,
                                                      double std = nn::Init{}.std) {
  manual_seed(seed);
  nn::Init init;
  init.dtype = dtype;
  init.std = std;
  return models::create_model(c, init);
}

inline std::unique_ptr<models::CausalLM> make_test_model(const char* preset_name, int64_t layers,
                                                         AttentionKernel kernel, DType dtype = DType::f32) {
  models::ModelConfig c = models::preset(preset_name);
  c.set_num_layers(layers);
  c.mlp_only_layers = c.is_moe() ? std::vector<int64_t>{1} : std::vector<int64_t>{};
  if (c.is_gpt2()) c.hidden_dropout = c.attention_dropout = 0.1;
  auto model = seeded_model(c, dtype, 1);
  model->set_attention_kernel(kernel);
  return model;
}

}  // namespace tidal::testing
