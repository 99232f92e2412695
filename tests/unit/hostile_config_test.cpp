// config.json from strangers and the sizes it asks for: every field is read by its JSON kind, every size
// is within the documented limits (docs/reliability.md) before anything is allocated, and a tensor whose
// byte count overflows is a clear error instead of a wrapped allocation.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/error_of.h"
#include "tidal/allocator.h"
#include "tidal/models/causal_lm.h"
#include "tidal/models/config.h"
#include "tidal/nn/layers.h"
#include "tidal/tensor.h"

namespace tidal::models {
namespace {

using json = nlohmann::json;
using testing::error_of;

json tiny_llama() { return config_to_json(preset("tiny-llama")); }

std::string config_error(const json& j) {
  return error_of([&] { config_from_json(j, "m/config.json"); });
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

#define EXPECT_HAS(msg, fragment) EXPECT_NE((msg).find(fragment), std::string::npos) << (msg)

TEST(HostileConfig, AWrappingIntermediateSizeIsRefusedBeforeAnyAllocation) {
  json j = tiny_llama();
  j["intermediate_size"] = int64_t(1) << 56;  // x 4 bytes wrapped to a 0-byte allocation
  const std::string msg = config_error(j);
  EXPECT_HAS(msg, "[config] m/config.json field 'intermediate_size' is 72057594037927936: it must be in [1, 1048576]");
  EXPECT_HAS(msg, "docs/reliability.md");
}

TEST(HostileConfig, ABillionLayersIsRefusedAtOnce) {
  json j = tiny_llama();
  j["num_hidden_layers"] = 1000000000;
  EXPECT_HAS(config_error(j), "field 'num_hidden_layers' is 1000000000: it must be in [1, 4096]");
  j["num_hidden_layers"] = 1e9;  // a float is not an integer, even a whole one
  EXPECT_EQ(config_error(j),
            "[config] m/config.json field 'num_hidden_layers' must be an integer, found a fractional "
            "number");
}

TEST(HostileConfig, FieldsOfTheWrongKindNameTheFileAndTheField) {
  json j = tiny_llama();
  j["intermediate_size"] = "big";
  EXPECT_EQ(config_error(j), "[config] m/config.json field 'intermediate_size' must be an integer, found a string");
  j = tiny_llama();
  j["tie_word_embeddings"] = "yes";
  EXPECT_EQ(config_error(j),
            "[config] m/config.json field 'tie_word_embeddings' must be true or false, found a string");
  j = tiny_llama();
  j["rope_theta"] = json::object();
  EXPECT_EQ(config_error(j), "[config] m/config.json field 'rope_theta' must be a number, found an object");
  j = tiny_llama();
  j["hidden_act"] = json::array({1});
  EXPECT_EQ(config_error(j), "[config] m/config.json field 'hidden_act' must be a string, found an array");
  j = tiny_llama();
  j["vocab_size"] = json(18446744073709551615ull);
  EXPECT_EQ(config_error(j), "[config] m/config.json field 'vocab_size' is too large for a 64-bit integer");
  j = tiny_llama();
  j.erase("hidden_size");
  EXPECT_EQ(config_error(j), "[config] m/config.json has no field 'hidden_size' (an integer)");
  EXPECT_EQ(config_error(json::array()), "[config] m/config.json must hold a JSON object, found an array");
}

TEST(HostileConfig, ModelTypesAndStringsAreNeverEchoed) {
  json j = tiny_llama();
  j["model_type"] = "root:x:0:0:root:/root:/bin/bash";
  const std::string msg = config_error(j);
  EXPECT_HAS(msg, "field 'model_type' names no model tidal builds");
  EXPECT_EQ(msg.find("root:x"), std::string::npos) << msg;
}

// Sliding-window fields: wrong counts and entries are named by count and index, never echoed.
TEST(HostileConfig, LayerTypesAreCheckedWithoutEchoingThem) {
  json j = config_to_json(preset("tiny-qwen2"));
  j["use_sliding_window"] = true;
  j["sliding_window"] = 4;
  j["layer_types"] = {"full_attention", "root:x:0:0:root:/root:/bin/bash"};
  std::string msg = config_error(j);
  EXPECT_HAS(msg, "field 'layer_types' entry 1 must be full_attention or sliding_attention");
  EXPECT_EQ(msg.find("root:x"), std::string::npos) << msg;
  j["layer_types"] = json::array();
  for (int i = 0; i < 100000; ++i) j["layer_types"].push_back("sliding_attention");
  msg = config_error(j);
  EXPECT_HAS(msg, "field 'layer_types' lists 100000 entries: it must list one per layer (2)");
  EXPECT_LT(msg.size(), 200u);
  j["layer_types"] = "sliding_attention";
  EXPECT_HAS(config_error(j), "field 'layer_types' must be an array of one entry per layer (2)");
  j = config_to_json(preset("tiny-llama"));
  j["sliding_window"] = "root:x:0:0:root:/root:/bin/bash";
  msg = config_error(j);
  EXPECT_HAS(msg, "field 'sliding_window' is set: LlamaAttention attends to every earlier token");
  EXPECT_EQ(msg.find("root:x"), std::string::npos) << msg;
  j["sliding_window"] = 4096;
  EXPECT_HAS(config_error(j), "field 'sliding_window' is 4096: LlamaAttention");
}

TEST(HostileConfig, MoeFieldsAreBounded) {
  json j = config_to_json(preset("tiny-qwen3-moe"));
  j["mlp_only_layers"] = {0, 7};
  EXPECT_HAS(config_error(j), "m/config.json: mlp_only_layers names layer 7, not one of the 2 layers");
  j["mlp_only_layers"] = {0, -1};
  EXPECT_HAS(config_error(j), "mlp_only_layers names layer -1");
  j["mlp_only_layers"] = {"0"};
  EXPECT_EQ(config_error(j), "[config] m/config.json field 'mlp_only_layers'[0] must be an integer, found a string");
  j = config_to_json(preset("tiny-qwen3-moe"));
  j["num_experts"] = 100000;
  EXPECT_HAS(config_error(j), "field 'num_experts' is 100000: it must be in [1, 4096]");
  j = config_to_json(preset("tiny-qwen3-moe"));
  j["num_experts_per_tok"] = 9;  // of 8
  EXPECT_HAS(config_error(j), "field 'num_experts_per_tok' is 9: it must be in [1, 8]");
}

TEST(HostileConfig, MillionsOfSmallExpertsAreRefused) {
  json j = config_to_json(preset("tiny-qwen3-moe"));
  j["num_hidden_layers"] = kMaxLayers;
  j["num_experts"] = kMaxExperts;  // few parameters (width 32), but 16 million expert modules
  j["mlp_only_layers"] = json::array();
  EXPECT_HAS(config_error(j),
             "m/config.json: 4096 experts in each of 4096 sparse layers are 16777216 experts in all, "
             "more than the 131072 tidal allows");
}

TEST(HostileConfig, SizesWithinEachLimitAreStillBoundedTogether) {
  json j = config_to_json(preset("tiny-qwen3-moe"));
  j["num_hidden_layers"] = kMaxLayers;
  j["num_experts"] = 32;  // 131072 experts in all: the limit
  j["hidden_size"] = kMaxWidth;
  j["moe_intermediate_size"] = kMaxWidth;  // 131072 x 3 x 2^40 parameters: each product checked
  j["mlp_only_layers"] = json::array();
  EXPECT_HAS(config_error(j), " parameters, more than the 35184372088832 tidal allows");
  // Past int64, the count says so instead of wrapping.
  ModelConfig c = preset("tiny-qwen3-moe");
  c.num_hidden_layers = int64_t(1) << 40;
  c.hidden_size = c.vocab_size = int64_t(1) << 40;
  EXPECT_HAS(error_of([&] { c.parameter_count(); }), "[config] the parameter count: ");
  EXPECT_HAS(error_of([&] { c.parameter_count(); }), "overflows a 64-bit size");
}

TEST(HostileConfig, DeepNestingInAFieldIsAParseError) {
  std::string text = tiny_llama().dump();
  text.insert(1, "\"rope_scaling\": " + std::string(100000, '[') + std::string(100000, ']') + ", ");
  const std::string path = write_file("deep_config.json", text);
  EXPECT_HAS(error_of([&] { load_config(path); }), "[config] " + path + " is nested more than 512 levels deep");
  std::filesystem::remove(path);
}

TEST(HostileConfig, LoadConfigNamesTheFileInSyntaxAndFieldErrors) {
  std::string path = write_file("bad_syntax_config.json", "{\"vocab_size\": 12,");
  EXPECT_HAS(error_of([&] { load_config(path); }), "[config] " + path + " is not valid JSON (syntax error near byte");
  json j = tiny_llama();
  j["head_dim"] = -4;
  path = write_file("bad_field_config.json", j.dump());
  EXPECT_EQ(error_of([&] { load_config(path); }),
            "[config] " + path + " field 'head_dim' is -4: it must be in [0, 1048576]");
  std::filesystem::remove(path);
}

// A 1T-parameter mixture of experts (Kimi K2's sizes in a qwen3_moe config) is within every limit.
TEST(HostileConfig, ATrillionParameterConfigIsWithinTheLimits) {
  json j = config_to_json(preset("tiny-qwen3-moe"));
  j["vocab_size"] = 163840;
  j["hidden_size"] = 7168;
  j["intermediate_size"] = 18432;
  j["num_hidden_layers"] = 61;
  j["num_attention_heads"] = 64;
  j["num_key_value_heads"] = 64;
  j["head_dim"] = 128;
  j["num_experts"] = 384;
  j["num_experts_per_tok"] = 8;
  j["moe_intermediate_size"] = 2048;
  j["max_position_embeddings"] = 131072;
  j["mlp_only_layers"] = {0};
  const ModelConfig c = config_from_json(j, "k2/config.json");
  EXPECT_GT(c.parameter_count(), int64_t(1000) * 1000 * 1000 * 1000);
  EXPECT_LT(c.parameter_count(), kMaxParameters);
}

TEST(HostileConfig, ParameterCountIsTheBuiltModels) {
  for (const char* name : {"tiny-gpt2", "tiny-llama", "tiny-qwen3", "tiny-qwen3-moe", "tiny-mistral", "tiny-qwen2",
                           "tiny-gemma3", "gpt2-124m", "qwen3-30b-a3b"}) {
    nn::Init init;
    init.device = Device::meta();
    ModelConfig c = preset(name);
    EXPECT_EQ(c.parameter_count(), create_model(c, init)->num_parameters()) << name;
    c.attention_bias = !c.is_gpt2();
    c.tie_word_embeddings = !c.tie_word_embeddings && !c.is_gpt2();
    EXPECT_EQ(c.parameter_count(), create_model(c, init)->num_parameters()) << name << " (bias, untied)";
  }
}

TEST(HostileSizes, ATensorWhoseBytesOverflowIsAClearError) {
  const int64_t big = int64_t(1) << 62;
  const std::string msg = error_of([&] { empty({big, 4}, DType::f32); });
  EXPECT_HAS(msg, "[empty] a f32 tensor of shape (4611686018427387904, 4) would need more than 2^63 bytes");
  EXPECT_HAS(error_of([&] { empty_host({3, -1}, DType::f32); }), "[empty_host] negative dimension in shape (3, -1)");
  EXPECT_HAS(error_of([&] {
               zeros({int64_t(1) << 40, int64_t(1) << 40}, DType::bf16, Device::meta());
             }),
             "would need more than 2^63 bytes");
}

TEST(HostileSizes, ARequestNoMachineHoldsIsOutOfMemory) {
  const int64_t huge = int64_t(1) << 61;  // fits int64, but more than any machine: exit code 3, not a crash
  EXPECT_THROW(empty({huge}, DType::u8), OutOfMemory);
}

}  // namespace
}  // namespace tidal::models
