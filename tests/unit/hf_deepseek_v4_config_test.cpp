// DeepSeek-V4's config.json (model_type deepseek_v4) as transformers 5's DeepseekV4Config writes it
// (tests/fixtures/hf/deepseek_v4_fields.v5.json: its fields and defaults, scripts/deepseek_v4_fixtures.py fields):
// every field read or listed harmless, the legacy names folded in as the class folds them, and what tidal does not
// build (other scoring functions, ...) refused naming the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "tests/support/error_of.h"
#include "tests/support/hf_fixture_config.h"
#include "tidal/models/config_fields.h"
#include "tidal/train/arguments.h"

namespace tidal::models {
namespace {

using json = nlohmann::json;

#define EXPECT_HAS(msg, fragment) EXPECT_NE((msg).find(fragment), std::string::npos) << (msg)

json fields_file() {
  const std::string path = std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/hf/deepseek_v4_fields.v5.json";
  return parse_json(io::read_file(path), path);
}

// The class defaults (DeepSeek-V4-Flash's sizes, 43 layers) with every layer a sliding one.
json sliding_defaults() {
  json j = fields_file()["defaults"];
  j["layer_types"] = std::vector<std::string>(j["num_hidden_layers"].get<size_t>(), "sliding_attention");
  return j;
}

std::string config_error(const json& j) { return testing::config_error(j, "v4/config.json"); }

TEST(HfDeepseekV4Config, EveryFieldIsReadOrHarmless) {
  const json file = fields_file();
  std::set<std::string> read;
  const ModelConfig c = config_from_json(sliding_defaults(), "defaults", &read);
  std::set<std::string> harmless;
  for (const HarmlessField& h : harmless_config_fields(c.model_type)) {
    harmless.insert(h.name);
    EXPECT_EQ(read.count(h.name), 0u) << h.name << " is read and listed as harmless";
  }
  for (const json& f : file["fields"])
    EXPECT_TRUE(read.count(f.get<std::string>()) || harmless.count(f.get<std::string>()))
        << f << " of DeepseekV4Config (transformers " << file["transformers"] << ") is neither read nor harmless";
}

TEST(HfDeepseekV4Config, TheClassDefaultsAreV4Flash) {
  const ModelConfig c = config_from_json(sliding_defaults(), "defaults");
  EXPECT_TRUE(c.is_deepseek_v4() && c.is_moe());
  EXPECT_EQ(c.head_size(), 512);
  EXPECT_EQ(c.kv_heads(), 1);
  EXPECT_EQ(c.q_lora_rank, 1024);
  EXPECT_EQ(c.v4.rope_dim, 64);  // 512 x 0.125
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.v4.compress_rope_theta, 160000.0);
  EXPECT_EQ(c.sliding_window, 128);
  EXPECT_EQ(c.attention_window(0), 128);
  EXPECT_EQ(c.v4.o_groups, 8);
  EXPECT_EQ(c.v4.o_lora_rank, 1024);
  EXPECT_EQ(c.v4.hc_mult, 4);
  EXPECT_EQ(c.v4.hc_sinkhorn_iters, 20);
  EXPECT_EQ(c.v4.hc_eps, 1e-6);
  EXPECT_EQ(c.v4.swiglu_limit, 10.0);
  EXPECT_EQ(c.num_experts, 256);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.intermediate_size, 2048);
  EXPECT_EQ(c.routed_scaling_factor, 1.5);
  EXPECT_EQ(c.v4.compress_rate_csa, 4);
  EXPECT_EQ(c.v4.compress_rate_hca, 128);
  EXPECT_EQ(c.v4.index_topk, 512);
  ASSERT_EQ(c.v4.hash_moe.size(), 43u);
  EXPECT_TRUE(c.v4.hash_moe[0] && c.v4.hash_moe[2] && !c.v4.hash_moe[3]);  // 3 hash layers, then moe
  for (int64_t l = 0; l < 43; ++l) EXPECT_TRUE(c.is_moe_layer(l));
  // About V4-Flash's published 284B (its MTP module aside).
  EXPECT_GT(c.parameter_count(), int64_t(270e9));
  EXPECT_LT(c.parameter_count(), int64_t(290e9));
}

TEST(HfDeepseekV4Config, LegacyNamesFoldInAsTransformersFoldsThem) {
  json j = sliding_defaults();
  j["num_hidden_layers"] = 3;
  j.erase("layer_types");
  j.erase("mlp_layer_types");
  j.erase("partial_rotary_factor");
  j.erase("rope_parameters");
  j["compress_ratios"] = {0, 0, 0, 0};  // cut to the layer count
  j["num_hash_layers"] = 1;
  j["qk_rope_head_dim"] = 32;
  const ModelConfig c = config_from_json(j, "legacy");
  EXPECT_EQ(c.layer_types, std::vector<std::string>(3, "sliding_attention"));
  EXPECT_EQ(c.v4.hash_moe, (std::vector<bool>{true, false, false}));
  EXPECT_EQ(c.v4.rope_dim, 32);
  // And round trip through the config.json tidal writes.
  const ModelConfig back = config_from_json(config_to_json(c), "written");
  EXPECT_EQ(back.v4.hash_moe, c.v4.hash_moe);
  EXPECT_EQ(back.v4.rope_dim, 32);
  EXPECT_EQ(back.layer_types, c.layer_types);
  EXPECT_EQ(back.parameter_count(), c.parameter_count());
}

TEST(HfDeepseekV4Config, TheClassDefaultScheduleIsBuilt) {
  // V4-Pro's schedule (transformers' default layer_types): two HCA layers, then CSA and HCA alternating.
  const ModelConfig c = config_from_json(fields_file()["defaults"], "defaults");
  EXPECT_TRUE(c.is_heavily_compressed(0) && c.is_heavily_compressed(1) && c.is_heavily_compressed(2));
  EXPECT_TRUE(c.is_sparse_compressed(3) && c.is_heavily_compressed(4) && c.is_sparse_compressed(5));
  EXPECT_EQ(c.v4.compress_rate_csa, 4);
  EXPECT_EQ(c.v4.index_n_heads, 64);
  EXPECT_EQ(c.v4.index_head_dim, 128);
  // transformers' DeepseekV4ForCausalLM(DeepseekV4Config()) built on the meta device: sum of its parameters' numel.
  EXPECT_EQ(c.parameter_count(), int64_t(284325869015));
  // The legacy per-layer ratios.
  json j = sliding_defaults();
  std::vector<int64_t> ratios(43, 0);
  ratios[0] = 4;
  ratios[1] = 128;
  j["compress_ratios"] = ratios;
  j.erase("layer_types");
  const ModelConfig legacy = config_from_json(j, "legacy");
  EXPECT_TRUE(legacy.is_sparse_compressed(0) && legacy.is_heavily_compressed(1) && !legacy.is_compressed(2));
}

TEST(HfDeepseekV4Config, HeavilyCompressedLayersAreBuilt) {
  json j = sliding_defaults();
  j["layer_types"][0] = "heavily_compressed_attention";
  const ModelConfig c = config_from_json(j, "hca");
  EXPECT_TRUE(c.is_heavily_compressed(0));
  EXPECT_FALSE(c.is_heavily_compressed(1));
  // Its compressor: kv_proj and gate_proj (4096 -> 512), position_bias (128, 512), kv_norm (512).
  EXPECT_EQ(c.parameter_count() - config_from_json(sliding_defaults(), "sliding").parameter_count(),
            2 * 4096 * 512 + 128 * 512 + 512);
}

// The compressed layers' YaRN (the published V4-Flash / V4-Pro configs: compress_rope_theta 160000, yarn factor 16
// over 65536 positions), in each form DeepseekV4Config reads: a flat rope_parameters or transformers 4.x's
// rope_scaling (folded into the compressed layers' rope with attention_factor 1: the V4 reference does not scale
// cos/sin), or the nested form the class saves (what it says; no attention_factor: 0.1 ln(factor) + 1). The main
// rope stays the default; tidal's written config reads back the same.
TEST(HfDeepseekV4Config, TheCompressedLayersRopeTakesYarnInEveryForm) {
  const json yarn = {{"rope_type", "yarn"},
                     {"factor", 16},
                     {"original_max_position_embeddings", 65536},
                     {"beta_fast", 32},
                     {"beta_slow", 1}};
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    json j = sliding_defaults();
    j["layer_types"][0] = "compressed_sparse_attention";
    j.erase("rope_parameters");
    j[key] = yarn;
    const ModelConfig c = config_from_json(j, key);
    const RopeScaling& s = c.v4.compress_rope_scaling;
    EXPECT_EQ(s.type, RopeType::yarn) << key;
    EXPECT_EQ(s.factor, 16.0);
    EXPECT_EQ(s.original_max_position_embeddings, 65536);
    EXPECT_EQ(s.attention_factor, 1.0) << key;
    EXPECT_EQ(c.rope_scaling.type, RopeType::standard) << key;  // the sliding layers' rope
    const ModelConfig back = config_from_json(config_to_json(c), "written");
    EXPECT_EQ(back.v4.compress_rope_scaling, s);
    EXPECT_EQ(back.v4.compress_rope_theta, c.v4.compress_rope_theta);
    EXPECT_EQ(back.rope_theta, c.rope_theta);
  }
  json j = sliding_defaults();
  j["layer_types"][0] = "heavily_compressed_attention";
  for (const auto& [k, v] : yarn.items()) j["rope_parameters"]["compress"][k] = v;
  const ModelConfig nested = config_from_json(j, "nested");
  EXPECT_EQ(nested.v4.compress_rope_scaling.type, RopeType::yarn);
  EXPECT_EQ(nested.v4.compress_rope_scaling.attention_factor, 0.0);  // derived, as transformers derives it
  EXPECT_EQ(config_from_json(config_to_json(nested), "written").v4.compress_rope_scaling,
            nested.v4.compress_rope_scaling);
  j["rope_parameters"]["compress"]["rope_type"] = "llama3";
  EXPECT_HAS(config_error(j), "'rope_parameters.compress.rope_type'");
  EXPECT_HAS(config_error(j), "the compressed layers' rope is default or yarn");
  j["rope_parameters"]["compress"]["rope_type"] = "yarn";
  j["rope_parameters"]["compress"].erase("factor");
  EXPECT_HAS(config_error(j), "rope type yarn needs the field 'factor'");
}

TEST(HfDeepseekV4Config, WhatTidalDoesNotBuildIsRefusedByName) {
  json j = sliding_defaults();
  j["layer_types"][5] = "sparse_attention";
  std::string e = config_error(j);
  EXPECT_HAS(e, "'sparse_attention' at layer 5");
  const std::pair<const char*, json> refused[] = {{"scoring_func", "softmax"},
                                                  {"num_key_value_heads", 2},
                                                  {"n_shared_experts", 2},
                                                  {"output_router_logits", true},
                                                  {"router_jitter_noise", 0.1},
                                                  {"hidden_act", "gelu"},
                                                  {"attention_bias", true},
                                                  {"partial_rotary_factor", 0.3},
                                                  {"qk_rope_head_dim", 16},
                                                  {"attention_dropout", 0.1},
                                                  {"mlp_bias", true}};
  for (const auto& [field, value] : refused) {
    j = sliding_defaults();
    j[field] = value;
    EXPECT_HAS(config_error(j), std::string("'") + field + "'");
  }
  j = sliding_defaults();
  j["mlp_layer_types"][1] = "dense";
  EXPECT_HAS(config_error(j), "'mlp_layer_types'");
  j = sliding_defaults();
  j["o_groups"] = 7;  // does not divide 64 heads
  EXPECT_HAS(config_error(j), "o_groups 7");
  j = sliding_defaults();
  j["rope_parameters"]["main"]["rope_type"] = "yarn";
  EXPECT_HAS(config_error(j), "'rope_parameters.main.rope_type'");
}

// Megatron's dropout flags on a V4 model: refused naming the flags (V4's layers build no dropout), never ignored.
TEST(HfDeepseekV4Config, DropoutFlagsAreRefused) {
  const std::string config = TIDAL_SOURCE_DIR "/tests/fixtures/hf/tiny_deepseek_v4_csa/config.json";
  for (const char* flag : {"--attention-dropout", "--hidden-dropout"}) {
    const std::string e = testing::error_of([&] {
      train::parse_train_args({"--config", config, "--mock-data", "--seq-length", "16", flag, "0.1"}).model.validate();
    });
    EXPECT_HAS(e, "dropout is not supported for deepseek_v4 yet");
    EXPECT_HAS(e, "give --attention-dropout 0 --hidden-dropout 0");
  }
  EXPECT_NO_THROW(
      train::parse_train_args({"--config", config, "--mock-data", "--seq-length", "16", "--attention-dropout", "0"}));
}

}  // namespace
}  // namespace tidal::models
