// The published config.json of each supported family (tests/fixtures/hf/published/: hand-written from
// the model cards in the 4.x format they were published in, and published/v5/: the same re-saved by
// transformers 5's config class, scripts/hf_fixtures.py published) reads into the model of tidal's
// preset of that size: the same shapes, biases, tie, RoPE table, windows and parameter count. Both
// formats give the same model. (tests/integration/plan_cli_test.cpp plans them with tidal plan.)
#include <gtest/gtest.h>

#include "tidal/models/causal_lm.h"

namespace tidal::models {
namespace {

struct PublishedFile {
  const char* file;    // under tests/fixtures/hf/published/
  const char* preset;  // tidal's preset of the same model
};

constexpr PublishedFile kFiles[] = {
    {"gpt2", "gpt2-124m"},
    {"llama-3.2-1b", "llama3.2-1b"},
    {"llama-3.1-8b", "llama3.1-8b"},
    {"llama-3.1-70b", "llama3.1-70b"},
    {"mistral-7b-v0.1", "mistral-7b-v0.1"},
    {"mistral-7b-v0.3", "mistral-7b"},
    {"qwen2.5-0.5b-instruct", "qwen2.5-0.5b"},
    {"qwen2.5-7b-instruct", "qwen2.5-7b"},
    {"qwen2.5-72b-instruct", "qwen2.5-72b"},
    {"qwen3-8b", "qwen3-8b"},
    {"qwen3-30b-a3b", "qwen3-30b-a3b"},
    {"deepseek-v3", "deepseek-v3"},  // without its fp8 quantization_config (refused: load bf16 weights)
};

std::string published(const std::string& name) {
  return std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/hf/published/" + name + ".json";
}

// Every field that decides the math, compared one by one (the message names the field).
void expect_same_model(const ModelConfig& got, const ModelConfig& want, const std::string& what) {
  EXPECT_EQ(got.model_type, want.model_type) << what;
  EXPECT_EQ(got.vocab_size, want.vocab_size) << what;
  EXPECT_EQ(got.hidden_size, want.hidden_size) << what;
  EXPECT_EQ(got.intermediate_size, want.intermediate_size) << what;
  EXPECT_EQ(got.num_hidden_layers, want.num_hidden_layers) << what;
  EXPECT_EQ(got.num_attention_heads, want.num_attention_heads) << what;
  EXPECT_EQ(got.kv_heads(), want.kv_heads()) << what;
  EXPECT_EQ(got.head_size(), want.head_size()) << what;
  EXPECT_EQ(got.max_position_embeddings, want.max_position_embeddings) << what;
  EXPECT_EQ(got.norm_eps, want.norm_eps) << what;
  EXPECT_EQ(got.tie_word_embeddings, want.tie_word_embeddings) << what;
  EXPECT_EQ(got.attention_bias, want.attention_bias) << what;
  EXPECT_EQ(got.qkv_bias, want.qkv_bias) << what;
  EXPECT_EQ(got.qk_norm, want.qk_norm) << what;
  EXPECT_EQ(got.hidden_act, want.hidden_act) << what;
  EXPECT_EQ(got.num_experts, want.num_experts) << what;
  EXPECT_EQ(got.num_experts_per_tok, want.num_experts_per_tok) << what;
  EXPECT_EQ(got.moe_intermediate_size, want.moe_intermediate_size) << what;
  EXPECT_EQ(got.q_lora_rank, want.q_lora_rank) << what;  // MLA
  EXPECT_EQ(got.kv_lora_rank, want.kv_lora_rank) << what;
  EXPECT_EQ(got.qk_head_size(), want.qk_head_size()) << what;
  EXPECT_EQ(got.v_head_size(), want.v_head_size()) << what;
  EXPECT_EQ(got.rope_interleave, want.rope_interleave) << what;
  EXPECT_EQ(got.attention_scale(), want.attention_scale()) << what;
  EXPECT_EQ(got.router_score, want.router_score) << what;  // DeepSeek's routing
  EXPECT_EQ(got.router_expert_bias, want.router_expert_bias) << what;
  EXPECT_EQ(got.n_group, want.n_group) << what;
  EXPECT_EQ(got.topk_group, want.topk_group) << what;
  EXPECT_EQ(got.routed_scaling_factor, want.routed_scaling_factor) << what;
  EXPECT_EQ(got.n_shared_experts, want.n_shared_experts) << what;
  EXPECT_EQ(got.norm_topk_prob, want.norm_topk_prob) << what;
  EXPECT_EQ(got.router_aux_loss_coef, want.router_aux_loss_coef) << what;
  for (int64_t l = 0; l < want.num_hidden_layers; ++l) {
    EXPECT_EQ(got.attention_window(l), want.attention_window(l)) << what << " layer " << l;
    EXPECT_EQ(got.is_moe_layer(l), want.is_moe_layer(l)) << what << " layer " << l;
  }
  if (!want.is_gpt2()) {
    const RopeFrequencies a = got.rope_frequencies(4096), b = want.rope_frequencies(4096);
    EXPECT_EQ(a.inv_freq, b.inv_freq) << what << " RoPE";
    EXPECT_EQ(a.attention_scaling, b.attention_scaling) << what << " RoPE";
  }
  EXPECT_EQ(got.parameter_count(), want.parameter_count()) << what;
}

TEST(PublishedConfigs, EachReadsAsItsPresetIn4xAnd5xFormat) {
  for (const PublishedFile& p : kFiles) {
    const ModelConfig want = preset(p.preset);
    expect_same_model(load_config(published(p.file)), want, std::string(p.file) + " (4.x)");
    expect_same_model(load_config(published(std::string("v5/") + p.file)), want, std::string(p.file) + " (5.x)");
  }
}

// The window is what changes between the two Mistral 7B releases: v0.1 slides over 4096 keys on every
// layer, v0.3 has none (sliding_window null).
TEST(PublishedConfigs, MistralWindowsAreThoseOfEachRelease) {
  const ModelConfig v01 = load_config(published("v5/mistral-7b-v0.1"));
  const ModelConfig v03 = load_config(published("v5/mistral-7b-v0.3"));
  for (int64_t l = 0; l < 32; ++l) {
    EXPECT_EQ(v01.attention_window(l), 4096) << l;
    EXPECT_EQ(v03.attention_window(l), 0) << l;
  }
}

}  // namespace
}  // namespace tidal::models
