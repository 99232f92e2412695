// LoRA on every family (nn/lora.h): the targets PEFT's rule and MindSpeed's names pick, the frozen base,
// the adapters starting as the identity, merged weights, and the errors a user can cause.
#include <gtest/gtest.h>

#include "tests/support/error_of.h"
#include "tests/support/gradcheck.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/models/causal_lm.h"
#include "tidal/models/peft_adapter.h"
#include "tidal/nn/lora.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/random.h"

namespace tidal::models {
namespace {

const char* kTiny[] = {"tiny-gpt2",    "tiny-llama", "tiny-qwen3",  "tiny-qwen3-moe",
                       "tiny-mistral", "tiny-qwen2", "tiny-gemma3", "tiny-deepseek-v3"};

nn::LoraConfig lora(std::vector<std::string> targets, int64_t r = 4) {
  nn::LoraConfig c;
  c.target_modules = std::move(targets);
  c.r = r;
  c.alpha = 8;
  return c;
}

Tensor some_ids(const ModelConfig& c) {
  manual_seed(7);
  return randint(0, c.vocab_size, {2, 12});
}

TEST(Lora, AllLinearStartsAsTheBaseModelAndTrainsOnlyAdapters) {
  for (const char* name : kTiny) {
    SCOPED_TRACE(name);
    auto model = create_model(preset(name));
    NoGradGuard no_grad;
    const Tensor ids = some_ids(model->config());
    const Tensor before = model->forward(ids).logits;
    const int64_t base = model->num_parameters();
    const nn::AppliedLora applied = nn::apply_lora(*model, lora({"all-linear"}), nn::Init{});
    EXPECT_FALSE(applied.modules.empty());
    for (const std::string& m : applied.modules) {  // never the LM head or a router
      EXPECT_NE(m, "lm_head");
      EXPECT_FALSE(m.ends_with(".mlp.gate")) << m;
    }
    EXPECT_TRUE(testing::bitwise_equal(model->forward(ids).logits, before));  // B = 0
    int64_t trained = 0;
    for (const auto& [n, p] : model->named_trainable_parameters()) {
      EXPECT_TRUE(nn::is_lora_parameter(n)) << n;
      trained += p.numel();
    }
    EXPECT_EQ(trained + base, model->num_parameters());
    EXPECT_EQ(applied.conv1d, std::string(name) == "tiny-gpt2");
  }
}

TEST(Lora, TargetsFollowPeftsRuleAndMindSpeedsNames) {
  auto llama = create_model(preset("tiny-llama"));
  const nn::AppliedLora a = nn::apply_lora(*llama, lora({"q_proj", "self_attn.o_proj"}), nn::Init{});
  EXPECT_EQ(a.targets, (std::vector<std::string>{"q_proj", "self_attn.o_proj"}));
  EXPECT_EQ(a.modules.size(), size_t(2 * llama->config().num_hidden_layers));
  EXPECT_EQ(a.modules[0], "model.layers.0.self_attn.q_proj");

  auto gpt2 = create_model(preset("tiny-gpt2"));
  const nn::AppliedLora g = nn::apply_lora(*gpt2, lora({"linear_qkv", "linear_fc2"}), nn::Init{});
  EXPECT_EQ(g.targets, (std::vector<std::string>{"attn.c_attn", "mlp.c_proj"}));  // not attn.c_proj
  for (const std::string& m : g.modules) EXPECT_TRUE(m.ends_with("attn.c_attn") || m.ends_with("mlp.c_proj")) << m;

  auto qwen = create_model(preset("tiny-qwen3"));
  const nn::AppliedLora q = nn::apply_lora(*qwen, lora({"linear_qkv", "linear_fc1"}), nn::Init{});
  EXPECT_EQ(q.targets, (std::vector<std::string>{"gate_proj", "k_proj", "q_proj", "up_proj", "v_proj"}));
}

TEST(Lora, UserErrorsNameTheTarget) {
  auto model = create_model(preset("tiny-qwen3-moe"));
  std::string e = testing::error_of([&] { nn::apply_lora(*model, lora({"qproj"}), nn::Init{}); });
  EXPECT_NE(e.find("qproj matches no linear layer"), std::string::npos) << e;
  EXPECT_NE(e.find("q_proj"), std::string::npos) << e;  // the names that would
  auto moe = create_model(preset("tiny-qwen3-moe"));
  e = testing::error_of([&] { nn::apply_lora(*moe, lora({"mlp.gate"}), nn::Init{}); });
  EXPECT_NE(e.find("cannot take an adapter"), std::string::npos) << e;
  auto llama = create_model(preset("tiny-llama"));
  e = testing::error_of([&] { nn::apply_lora(*llama, lora({"q_proj"}, 0), nn::Init{}); });
  EXPECT_NE(e.find("--lora-r must be positive"), std::string::npos) << e;
}

// Random adapters (B != 0): the merged model computes the adapted model's logits, Linear and Conv1D alike.
TEST(Lora, MergedStateDictGivesTheAdaptedLogits) {
  for (const char* name : {"tiny-gpt2", "tiny-llama", "tiny-deepseek-v3"}) {
    SCOPED_TRACE(name);
    auto model = create_model(preset(name));
    nn::apply_lora(*model, lora({"all-linear"}), nn::Init{});
    NoGradGuard no_grad;
    manual_seed(3);
    for (auto& [n, p] : model->named_parameters())
      if (n.ends_with("lora_B.weight")) p.copy_(mul(randn(p.shape()), 0.1));
    const Tensor ids = some_ids(model->config());
    const Tensor adapted = model->forward(ids).logits;
    auto plain = create_model(preset(name));
    EXPECT_FALSE(testing::all_close(plain->forward(ids).logits, adapted, 0, 1e-3));  // the adapters matter
    plain->load_state_dict(nn::merged_state_dict(*model));
    EXPECT_TRUE(testing::all_close(plain->forward(ids).logits, adapted, 1e-4, 1e-4));
  }
}

TEST(Lora, AdapterConfigRoundTripsAndRefusesWhatTidalLacks) {
  nn::LoraConfig c = lora({"q_proj", "v_proj"}, 8);
  c.dropout = 0.05;
  c.use_rslora = true;
  nn::AppliedLora applied;
  applied.targets = c.target_modules;
  const nlohmann::json j = adapter_config_json(c, applied, "base");
  const nn::LoraConfig back = lora_config_from_json(j, "adapter_config.json");
  EXPECT_EQ(back.r, 8);
  EXPECT_EQ(back.alpha, 8.0);
  EXPECT_EQ(back.dropout, 0.05);
  EXPECT_TRUE(back.use_rslora);
  EXPECT_EQ(back.target_modules, c.target_modules);
  EXPECT_DOUBLE_EQ(back.scaling(), 8.0 / std::sqrt(8.0));
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"use_dora", true},
                                                           {"rank_pattern", {{"q_proj", 4}}},
                                                           {"target_modules", ".*q_proj"},
                                                           {"layers_to_transform", {0}},
                                                           {"bias", "all"},
                                                           {"peft_type", "IA3"}}) {
    nlohmann::json bad = j;
    bad[field] = value;
    const std::string e = testing::error_of([&] { lora_config_from_json(bad, "adapter_config.json"); });
    EXPECT_NE(e.find(field == "peft_type" ? "not a LoRA adapter" : field), std::string::npos) << field << ": " << e;
  }
}

}  // namespace
}  // namespace tidal::models
