// Gemma 3's config.json as transformers 5 writes it (tests/fixtures/hf/tiny_gemma3, rope_parameters per layer
// type, layer_types) and as 4.x wrote it (rope_theta, rope_scaling, rope_local_base_freq,
// sliding_window_pattern): the same model; what tidal does not implement is refused by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/hf_fixture_config.h"

namespace tidal::models {
namespace {

using json = nlohmann::json;

#define EXPECT_HAS(msg, fragment) EXPECT_NE((msg).find(fragment), std::string::npos) << (msg)

json fixture() { return testing::hf_fixture_config("tiny_gemma3"); }
std::string config_error(const json& j) { return testing::config_error(j, "g/config.json"); }

TEST(HfGemma3Config, TransformersFiveAndFourGiveOneModel) {
  const ModelConfig v5 = config_from_json(fixture(), "tiny_gemma3");
  EXPECT_EQ(v5.attention_window(0), 5);
  EXPECT_EQ(v5.attention_window(1), 5);
  EXPECT_EQ(v5.attention_window(2), 0);  // full
  EXPECT_EQ(v5.attention_window(3), 5);
  EXPECT_EQ(v5.rope_theta, 1000000.0);
  EXPECT_EQ(v5.rope_scaling.type, RopeType::linear);
  EXPECT_EQ(v5.rope_scaling.factor, 2.0);
  EXPECT_EQ(v5.rope_local_theta, 10000.0);
  EXPECT_EQ(v5.query_pre_attn_scalar, 12.0);
  EXPECT_EQ(v5.pad_token_id, 0);
  EXPECT_TRUE(v5.tie_word_embeddings && v5.qk_norm);
  // The 4.x form of the same model: layers from the pattern (every 3rd full), the rope fields at the top.
  json v4 = fixture();
  v4.erase("rope_parameters");
  v4.erase("layer_types");
  v4["rope_theta"] = 1000000.0;
  v4["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  v4["rope_local_base_freq"] = 10000.0;
  v4["sliding_window_pattern"] = 3;
  const ModelConfig c4 = config_from_json(v4, "v4");
  EXPECT_EQ(c4.layer_types, v5.layer_types);
  EXPECT_EQ(c4.layer_rope_frequencies(0, 16).inv_freq, v5.layer_rope_frequencies(0, 16).inv_freq);
  EXPECT_EQ(c4.layer_rope_frequencies(2, 16).inv_freq, v5.layer_rope_frequencies(2, 16).inv_freq);
  EXPECT_NE(v5.layer_rope_frequencies(0, 16).inv_freq, v5.layer_rope_frequencies(2, 16).inv_freq);
  // tidal's own config.json reads back as the same model.
  const ModelConfig back = config_from_json(config_to_json(v5), "back");
  EXPECT_EQ(back.layer_types, v5.layer_types);
  EXPECT_EQ(back.layer_rope_frequencies(2, 16).inv_freq, v5.layer_rope_frequencies(2, 16).inv_freq);
  EXPECT_EQ(back.query_pre_attn_scalar, 12.0);
  EXPECT_EQ(back.pad_token_id, 0);
  EXPECT_EQ(back.parameter_count(), v5.parameter_count());
  // --num-layers re-applies the pattern of a preset.
  ModelConfig p = preset("tiny-gemma3");
  p.set_num_layers(8);
  EXPECT_EQ(p.attention_window(3), 0);
  EXPECT_EQ(p.attention_window(6), 8);
  EXPECT_EQ(p.attention_window(7), 0);
}

TEST(HfGemma3Config, WhatTidalDoesNotImplementIsRefused) {
  json j = fixture();
  j["final_logit_softcapping"] = 30.0;
  EXPECT_HAS(config_error(j), "field 'final_logit_softcapping' is 30.0: logit soft-capping is not implemented");
  j = fixture();
  j["attn_logit_softcapping"] = 50.0;
  EXPECT_HAS(config_error(j), "field 'attn_logit_softcapping' is 50.0");
  j = fixture();
  j["use_bidirectional_attention"] = true;
  EXPECT_HAS(config_error(j), "field 'use_bidirectional_attention' is true");
  j = fixture();
  j["hidden_activation"] = "relu";
  EXPECT_HAS(config_error(j), "field 'hidden_activation' is not supported");
  j = fixture();
  j["rope_parameters"]["sliding_attention"]["rope_type"] = "linear";
  EXPECT_HAS(config_error(j), "must be default: Gemma 3's sliding layers rotate with their base alone");
  j = fixture();
  j["model_type"] = "gemma3";  // multimodal, without a text_config
  EXPECT_HAS(config_error(j), "is a multimodal Gemma 3 config (model_type gemma3) without a 'text_config' object");
  j = fixture();
  j["pad_token_id"] = 64;
  EXPECT_HAS(config_error(j), "field 'pad_token_id' is 64: it must be in [0, 63]");
}

// Gemma-3-4B/12B/27B are published as Gemma3ForConditionalGeneration (model_type gemma3): tidal reads the
// language model from text_config, the top level's tie, init and (4.x) pad id applying to it; the image fields
// are left to the vision tower tidal does not build.
TEST(HfGemma3Config, AMultimodalConfigIsItsLanguageModel) {
  const json mm = testing::hf_fixture_config("tiny_gemma3_multimodal");
  const ModelConfig c = config_from_json(mm, "mm");
  EXPECT_EQ(c.model_type, "gemma3_text");
  EXPECT_EQ(c.num_hidden_layers, 3);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.attention_window(0), 5);
  EXPECT_EQ(c.attention_window(2), 0);
  json j = mm;
  j["text_config"]["model_type"] = "llama";
  EXPECT_HAS(config_error(j), "'s model_type must be gemma3_text");
  j = mm;
  j["tie_word_embeddings"] = false;
  j["text_config"]["tie_word_embeddings"] = true;
  EXPECT_HAS(config_error(j), "field 'tie_word_embeddings' is false: it differs from text_config's");
  j = mm;
  j["is_encoder_decoder"] = true;
  EXPECT_HAS(config_error(j), "field 'is_encoder_decoder' is true");
  j = mm;
  j["pad_token_id"] = 3;  // 4.x's place for it
  j["text_config"].erase("pad_token_id");
  EXPECT_EQ(config_from_json(j, "mm").pad_token_id, 3);
  // The published 4B's text_config (sizes of the preset): the same model as tidal's gemma3-4b.
  json four = mm;
  four["text_config"] = json::parse(R"({"model_type": "gemma3_text", "vocab_size": 262208, "hidden_size": 2560,
    "intermediate_size": 10240, "num_hidden_layers": 34, "num_attention_heads": 8, "num_key_value_heads": 4,
    "head_dim": 256, "query_pre_attn_scalar": 256, "sliding_window": 1024, "rope_scaling": {"rope_type": "linear",
    "factor": 8.0}, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "max_position_embeddings": 131072})");
  EXPECT_EQ(config_from_json(four, "gemma-3-4b").parameter_count(), preset("gemma3-4b").parameter_count());
}

}  // namespace
}  // namespace tidal::models
