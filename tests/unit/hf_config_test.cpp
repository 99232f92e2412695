// config.json as transformers 4.x and 5.x write it: both formats give one ModelConfig, transformers'
// defaults are tidal's for a field a file omits, and every field that would change the math in a way
// tidal does not implement is refused with its name and value (docs/interop.md).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/error_of.h"
#include "tidal/base/json.h"
#include "tidal/io/atomic_file.h"
#include "tidal/models/causal_lm.h"
#include "tidal/models/config.h"
#include "tidal/nn/layers.h"
#include "tidal/ops/random.h"

namespace tidal::models {
namespace {

using json = nlohmann::json;
using testing::error_of;

#define EXPECT_HAS(msg, fragment) EXPECT_NE((msg).find(fragment), std::string::npos) << (msg)

json fields_fixture(const std::string& name) {
  const std::string path = std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/hf/config_fields/" + name + ".json";
  return parse_json(io::read_file(path), path);
}

std::string config_error(const json& j) {
  return error_of([&] { config_from_json(j, "m/config.json"); });
}

json tiny(const char* type) {
  json j = {{"model_type", type},     {"vocab_size", 64},         {"hidden_size", 32}, {"intermediate_size", 64},
            {"num_hidden_layers", 2}, {"num_attention_heads", 2}, {"head_dim", 16},    {"num_key_value_heads", 1}};
  if (std::string(type) == "qwen3_moe")
    j.update({{"num_local_experts", 4}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 16}});
  return j;
}

TEST(HfConfig, TransformersDefaultConfigsParseAndMatchTidalsDefaults) {
  // Each class's own defaults (to_dict() of a default config, both versions) parse; and a file that
  // gives only the sizes means what transformers' defaults mean.
  for (const char* family : {"llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "gpt2"})
    for (const char* v : {".v4", ".v5"}) {
      SCOPED_TRACE(std::string(family) + v);
      const json defaults = fields_fixture(family + std::string(v))["defaults"];
      const ModelConfig full = config_from_json(defaults);
      json minimal;
      for (const char* key : {"model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                              "num_attention_heads", "n_embd", "n_layer", "n_head", "n_positions", "num_experts",
                              "num_local_experts", "num_experts_per_tok", "moe_intermediate_size"})
        if (defaults.contains(key)) minimal[key] = defaults[key];
      EXPECT_EQ(config_to_json(config_from_json(minimal)).dump(), config_to_json(full).dump());
    }
}

TEST(HfConfig, Qwen3HeadDimDefaultsTo128AsInTransformers) {
  json j = tiny("qwen3");
  j.erase("head_dim");
  EXPECT_EQ(config_from_json(j).head_size(), 128);  // Qwen3Config(head_dim=128), not hidden / heads (16)
  j["model_type"] = "llama";
  EXPECT_EQ(config_from_json(j).head_size(), 16);
}

TEST(HfConfig, Qwen3MoeExpertCountUnderEitherName) {
  json j = tiny("qwen3_moe");
  EXPECT_EQ(config_from_json(j).num_experts, 4);  // transformers 5: num_local_experts
  j.erase("num_local_experts");
  j["num_experts"] = 4;  // 4.x
  EXPECT_EQ(config_from_json(j).num_experts, 4);
  j["num_local_experts"] = 8;
  EXPECT_HAS(config_error(j), "gives 'num_experts' = 4 and 'num_local_experts' = 8");
}

TEST(HfConfig, RopeRefusalsNameTheFieldAndValue) {
  json j = tiny("llama");
  j["rope_scaling"] = {{"type", "foo"}, {"factor", -1}};
  EXPECT_HAS(config_error(j),
             "field 'rope_scaling.type' is 'foo': tidal implements the rope types default, "
             "linear, dynamic, yarn, llama3");
  j["rope_scaling"] = {{"rope_type", "longrope"}};
  EXPECT_HAS(config_error(j), "field 'rope_scaling.rope_type' is 'longrope'");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "linear"}, {"rope_theta", 10000.0}, {"factor", -1}};
  EXPECT_HAS(config_error(j), "field 'rope_parameters.factor' is -1: rope type linear needs a positive number");
  j["rope_parameters"] = {{"rope_type", "linear"}, {"rope_theta", 10000.0}};
  EXPECT_HAS(config_error(j), "rope type linear needs the field 'factor'");
  j["rope_parameters"] = {
      {"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0}, {"high_freq_factor", 1.0}};
  EXPECT_HAS(config_error(j), "field 'rope_parameters.high_freq_factor' is 1.0: rope type llama3 needs it above");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  j["rope_theta"] = 10000.0;
  EXPECT_HAS(config_error(j), "gives rope_theta 10000 at the top level and 500000 in its rope dict");
  j.erase("rope_theta");
  j["rope_parameters"]["partial_rotary_factor"] = 0.5;
  EXPECT_HAS(config_error(j), "field 'rope_parameters.partial_rotary_factor' is 0.5");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", -5.0}};
  EXPECT_HAS(config_error(j), "field 'rope_parameters.rope_theta' is -5.0: it must be a positive number");
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}}}};
  EXPECT_HAS(config_error(j), "rope parameters per layer type are not supported");
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  EXPECT_HAS(config_error(j), "has both 'rope_scaling'");
}

TEST(HfConfig, Rope500000InTransformers5FormatIsRead) {
  // The case: a Llama written by transformers 5 with rope_theta 500000 was trained at 10000.
  json j = tiny("llama");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  EXPECT_EQ(config_from_json(j).rope_theta, 500000.0);
  j.erase("rope_parameters");
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(config_from_json(j).rope_theta, 500000.0);
}

// The windows of each layer, as transformers 5's config classes give them (ModelConfig::attention_window).
std::vector<int64_t> windows(const json& j) {
  const ModelConfig c = config_from_json(j);
  std::vector<int64_t> out;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) out.push_back(c.attention_window(l));
  return out;
}

TEST(HfConfig, SlidingWindowsAreReadPerLayerAsTransformersReadsThem) {
  using W = std::vector<int64_t>;
  json j = tiny("qwen3");
  j.update({{"use_sliding_window", false}, {"sliding_window", 4096}, {"max_window_layers", 1}});
  EXPECT_EQ(windows(j), (W{0, 0}));  // transformers: window null unless use_sliding_window
  j["use_sliding_window"] = true;
  EXPECT_EQ(windows(j), (W{0, 4096}));  // layers at or past max_window_layers slide
  j["max_window_layers"] = 2;
  EXPECT_EQ(windows(j), (W{0, 0}));
  j.erase("max_window_layers");
  EXPECT_EQ(windows(j), (W{0, 0}));  // Qwen3Config's default 28
  j["layer_types"] = {"sliding_attention", "full_attention"};
  j["max_window_layers"] = 2;
  EXPECT_EQ(windows(j), (W{4096, 0}));  // layer_types rule over max_window_layers
  j.erase("sliding_window");
  EXPECT_EQ(windows(j), (W{4096, 0}));  // the class default window
  j["sliding_window"] = nullptr;
  EXPECT_EQ(windows(j), (W{0, 0}));
  j["sliding_window"] = 0;
  EXPECT_HAS(config_error(j), "field 'sliding_window' is 0: it must be in [1, ");
  j["sliding_window"] = 16;
  j["layer_types"] = {"full_attention"};
  EXPECT_HAS(config_error(j), "field 'layer_types' lists 1 entries: it must list one per layer (2)");
  j["layer_types"] = {"full_attention", "chunked_attention"};
  EXPECT_HAS(config_error(j), "field 'layer_types' entry 1 must be full_attention or sliding_attention");

  json q = tiny("qwen2");
  q.update({{"use_sliding_window", true}, {"sliding_window", 8}, {"max_window_layers", 1}});
  EXPECT_EQ(windows(q), (W{0, 8}));
  EXPECT_TRUE(config_from_json(q).qkv_bias);

  json m = tiny("qwen3_moe");
  m.update({{"use_sliding_window", true}, {"sliding_window", 4096}});
  EXPECT_EQ(windows(m), (W{4096, 4096}));  // Qwen3MoeAttention: every layer
  m["sliding_window"] = nullptr;
  EXPECT_EQ(windows(m), (W{0, 0}));

  json mi = tiny("mistral");
  EXPECT_EQ(windows(mi), (W{4096, 4096}));  // MistralConfig's default window, on every layer
  mi["sliding_window"] = nullptr;
  EXPECT_EQ(windows(mi), (W{0, 0}));  // Mistral 7B v0.2 and later
  mi["sliding_window"] = 32;
  EXPECT_EQ(windows(mi), (W{32, 32}));

  json l = tiny("llama");
  l["sliding_window"] = 4096;
  EXPECT_HAS(config_error(l), "field 'sliding_window' is 4096: LlamaAttention attends to every earlier token");
  l["sliding_window"] = nullptr;
  EXPECT_NO_THROW(config_from_json(l));
}

TEST(HfConfig, WindowsAndBiasesSurviveTheSavedConfig) {
  for (const char* type : {"mistral", "qwen2", "qwen3", "qwen3_moe"}) {
    json j = tiny(type);
    j.update({{"use_sliding_window", true}, {"sliding_window", 5}, {"max_window_layers", 1}});
    const ModelConfig c = config_from_json(j);
    const ModelConfig back = config_from_json(config_to_json(c));
    EXPECT_EQ(back.sliding_window, c.sliding_window) << type;
    EXPECT_EQ(back.layer_types, c.layer_types) << type;
    EXPECT_EQ(back.qkv_bias, c.qkv_bias) << type;
    EXPECT_EQ(back.parameter_count(), c.parameter_count()) << type;
  }
}

TEST(HfConfig, FieldsThatChangeTheMathAreRefused) {
  json l = tiny("llama");
  l["mlp_bias"] = true;
  EXPECT_HAS(config_error(l), "field 'mlp_bias' is true: biases on the MLP projections are not implemented");
  l["mlp_bias"] = false;
  l["is_encoder_decoder"] = true;
  EXPECT_HAS(config_error(l), "field 'is_encoder_decoder' is true");
  l.erase("is_encoder_decoder");
  l["pruned_heads"] = {{"0", {1}}};
  EXPECT_HAS(config_error(l), "field 'pruned_heads' is {\"0\":[1]}");
  l["pruned_heads"] = json::object();
  EXPECT_NO_THROW(config_from_json(l));
  l["quantization_config"] = {{"quant_method", "gptq"}};
  EXPECT_HAS(config_error(l), "field 'quantization_config'");

  json g = {{"model_type", "gpt2"}, {"vocab_size", 64}, {"n_embd", 32},
            {"n_layer", 2},         {"n_head", 2},      {"n_positions", 64}};
  EXPECT_NO_THROW(config_from_json(g));
  g["scale_attn_weights"] = false;
  EXPECT_HAS(config_error(g), "field 'scale_attn_weights' is false");
  g["scale_attn_weights"] = true;
  g["scale_attn_by_inverse_layer_idx"] = true;
  EXPECT_HAS(config_error(g), "field 'scale_attn_by_inverse_layer_idx' is true");
  g["scale_attn_by_inverse_layer_idx"] = false;
  g["embd_pdrop"] = 0.0;
  EXPECT_HAS(config_error(g), "field 'embd_pdrop' is 0.0: tidal's gpt2 drops the embeddings with resid_pdrop (0.1)");
  g["embd_pdrop"] = 0.1;
  g["add_cross_attention"] = true;
  EXPECT_HAS(config_error(g), "field 'add_cross_attention' is true");
  g["add_cross_attention"] = false;
  g["tie_word_embeddings"] = false;
  EXPECT_HAS(config_error(g), "field 'tie_word_embeddings' is false");
  g["tie_word_embeddings"] = true;
  g["hidden_size"] = 48;  // GPT2Config's attribute_map: another name of n_embd
  EXPECT_HAS(config_error(g), "gives 'n_embd' = 32 and 'hidden_size' = 48");
}

TEST(HfConfig, ATiedHeadThatDiffersFromTheEmbeddingIsRefused) {
  json j = tiny("llama");
  j["tie_word_embeddings"] = true;
  nn::Init init;
  manual_seed(3);
  auto model = create_model(config_from_json(j), init);
  std::map<std::string, Tensor> sd = model->state_dict();
  ASSERT_EQ(sd.count("lm_head.weight"), 0u);
  sd["lm_head.weight"] = sd.at("model.embed_tokens.weight").clone();  // a saved copy: fine
  EXPECT_NO_THROW(model->load_hf_state_dict(sd));
  sd["lm_head.weight"] = randn(sd.at("model.embed_tokens.weight").shape());
  EXPECT_HAS(error_of([&] { model->load_hf_state_dict(sd); }),
             "tie_word_embeddings is true but the checkpoint has its own lm_head.weight (64, 32) that differs from "
             "model.embed_tokens.weight");
}

}  // namespace
}  // namespace tidal::models
