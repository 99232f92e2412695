// DeepSeek-V3's config.json as transformers 5 writes it (tests/fixtures/hf/tiny_deepseek_v3: rope_parameters,
// head_dim and qk_head_dim derived and saved) and as 4.x wrote it (rope_theta, rope_scaling): the same model;
// DeepSeek's own remote-code fields are read or refused by name; what tidal does not implement is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "tests/support/hf_fixture_config.h"

namespace tidal::models {
namespace {

using json = nlohmann::json;

#define EXPECT_HAS(msg, fragment) EXPECT_NE((msg).find(fragment), std::string::npos) << (msg)

json fixture() { return testing::hf_fixture_config("tiny_deepseek_v3"); }
std::string config_error(const json& j) { return testing::config_error(j, "ds/config.json"); }

TEST(HfDeepseekV3Config, TransformersFiveAndFourGiveOneModel) {
  const ModelConfig v5 = config_from_json(fixture(), "tiny_deepseek_v3");
  EXPECT_TRUE(v5.is_mla() && v5.is_moe());
  EXPECT_EQ(v5.q_lora_rank, 16);
  EXPECT_EQ(v5.kv_lora_rank, 12);
  EXPECT_EQ(v5.qk_head_size(), 12);  // 8 without RoPE + 4 rotary
  EXPECT_EQ(v5.v_head_size(), 6);
  EXPECT_EQ(v5.head_size(), 4);  // the rotary width, as transformers sets head_dim
  EXPECT_TRUE(v5.rope_interleave);
  EXPECT_EQ(v5.num_experts, 8);
  EXPECT_EQ(v5.n_group, 4);
  EXPECT_EQ(v5.topk_group, 2);
  EXPECT_EQ(v5.routed_scaling_factor, 2.5);
  EXPECT_EQ(v5.n_shared_experts, 1);
  EXPECT_EQ(v5.router_score, ModelConfig::RouterScore::sigmoid);
  EXPECT_TRUE(v5.router_expert_bias);
  EXPECT_EQ(v5.router_aux_loss_coef, 0.0);
  EXPECT_FALSE(v5.is_moe_layer(0));  // first_k_dense_replace 1
  EXPECT_TRUE(v5.is_moe_layer(1) && v5.is_moe_layer(2));
  EXPECT_EQ(v5.rope_scaling.type, RopeType::yarn);
  // yarn_apply_mscale: qk^-1/2 x (0.1 ln 4 + 1)^2.
  const double m = 0.1 * std::log(4.0) + 1.0;
  EXPECT_DOUBLE_EQ(v5.attention_scale(), m * m / std::sqrt(12.0));
  // 4.x: the rope fields at the top level, no derived head_dim / qk_head_dim, DeepSeek's own routing names.
  json v4 = fixture();
  json rope = v4["rope_parameters"];
  v4.erase("rope_parameters");
  v4.erase("head_dim");
  v4.erase("qk_head_dim");
  v4["rope_theta"] = rope["rope_theta"];
  rope.erase("rope_theta");
  v4["rope_scaling"] = rope;
  v4["scoring_func"] = "sigmoid";
  v4["topk_method"] = "noaux_tc";
  v4["moe_layer_freq"] = 1;
  v4["aux_loss_alpha"] = 0.001;
  const ModelConfig c4 = config_from_json(v4, "v4");
  EXPECT_EQ(config_to_json(c4), config_to_json(v5));
  EXPECT_EQ(c4.rope_frequencies(16).inv_freq, v5.rope_frequencies(16).inv_freq);
  // tidal's own config.json reads back as the same model.
  EXPECT_EQ(config_to_json(config_from_json(config_to_json(v5), "back")), config_to_json(v5));
}

TEST(HfDeepseekV3Config, NullQLoraRankIsOneProjectionAndAbsentFieldsAreTheClassDefaults) {
  json j = fixture();
  j["q_lora_rank"] = nullptr;
  EXPECT_EQ(config_from_json(j, "null").q_lora_rank, 0);
  j.erase("q_lora_rank");
  EXPECT_EQ(config_from_json(j, "absent").q_lora_rank, 1536);  // DeepseekV3Config's default
  j = fixture();
  for (const char* k : {"n_group", "topk_group", "routed_scaling_factor", "first_k_dense_replace"}) j.erase(k);
  j["n_routed_experts"] = 256;
  j["num_experts_per_tok"] = 8;
  const ModelConfig c = config_from_json(j, "defaults");
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 4);
  EXPECT_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_EQ(c.first_k_dense_replace, 3);
  // transformers 5's attribute_map names.
  j = fixture();
  j.erase("n_routed_experts");
  j["num_local_experts"] = 8;
  j.erase("num_nextn_predict_layers");
  j["num_mtp_layers"] = 2;
  const ModelConfig a = config_from_json(j, "aliases");
  EXPECT_EQ(a.num_experts, 8);
  EXPECT_EQ(a.num_nextn_predict_layers, 2);
}

TEST(HfDeepseekV3Config, WhatChangesTheMathAndIsNotImplementedIsRefusedByName) {
  auto with = [](const char* key, json value) {
    json j = fixture();
    j[key] = std::move(value);
    return config_error(j);
  };
  EXPECT_HAS(with("scoring_func", "softmax"), "'scoring_func' is 'softmax'");
  EXPECT_HAS(with("topk_method", "greedy"), "'topk_method' is 'greedy'");
  EXPECT_HAS(with("moe_layer_freq", 2), "'moe_layer_freq' is 2");
  EXPECT_HAS(with("num_key_value_heads", 2), "'num_key_value_heads' is 2");
  EXPECT_HAS(with("head_dim", 8), "'head_dim' is 8");
  EXPECT_HAS(with("qk_head_dim", 16), "'qk_head_dim' is 16");
  EXPECT_HAS(with("hidden_act", "gelu"), "'hidden_act'");
  EXPECT_HAS(with("n_group", 3), "n_group 3 does not divide the 8 routed experts");
  EXPECT_HAS(with("num_experts_per_tok", 6), "num_experts_per_tok 6 is more than the 4 experts");
  EXPECT_HAS(with("n_group", 8), "fewer than 2 a group");
  EXPECT_HAS(with("routed_scaling_factor", -1), "routed_scaling_factor must be a positive number");
  json odd = fixture();
  odd.erase("head_dim");
  odd.erase("qk_head_dim");
  odd["qk_rope_head_dim"] = 3;
  EXPECT_HAS(config_error(odd), "even qk_rope_head_dim");
}

}  // namespace
}  // namespace tidal::models
