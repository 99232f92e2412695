// DeepSeek-V3's pieces that the golden files (hf_golden_test.cpp) do not single out: the router's correction
// bias is a buffer (saved and loaded, never given a gradient) that changes which experts are chosen;
// Megatron-LM's expert-bias update (--moe-router-enable-expert-bias) moves it by the rate towards balance
// from the step's token counts, counted once per forward (not again by a recompute's replay); the
// checkpoint's multi-token-prediction layers are skipped on load, as transformers skips them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "tests/support/error_of.h"
#include "tests/support/recompute_modes.h"
#include "tidal/dist/single_communicator.h"
#include "tidal/io/safetensors.h"
#include "tidal/models/moe.h"
#include "tidal/models/pretrained.h"
#include "tidal/ops/random.h"

namespace tidal::models {
namespace {

double max_abs_difference(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(double(x[i]) - double(y[i])));
  return worst;
}

const std::string kFixture = std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/hf/tiny_deepseek_v3";

std::map<std::string, Tensor> buffers(const CausalLM& m) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, b] : m.named_buffers()) out.emplace(name, b);
  return out;
}

TEST(DeepseekV3, TheCorrectionBiasIsAStateBufferThatChangesTheChoice) {
  std::unique_ptr<CausalLM> model = load_pretrained_model(kFixture);
  const std::string bias = "model.layers.1.mlp.gate.e_score_correction_bias";
  const std::map<std::string, Tensor> state = model->state_dict();
  ASSERT_TRUE(state.count(bias));
  for (const auto& [name, p] : model->named_parameters()) EXPECT_NE(name, bias);
  EXPECT_EQ(buffers(*model).size(), 2u);  // layers 1 and 2; no load counts without an update rate
  EXPECT_FALSE(state.at(bias).requires_grad());
  manual_seed(5);
  const Tensor ids = randint(0, 64, {2, 16});
  model->train(false);
  const Tensor with_bias = model->forward(ids).logits;
  // The fixture's bias is random (scripts/hf_fixtures.py): zeroed, other experts win somewhere.
  std::map<std::string, Tensor> zeroed = state;
  for (const char* layer : {"1", "2"}) {
    const std::string name = std::string("model.layers.") + layer + ".mlp.gate.e_score_correction_bias";
    zeroed[name] = zeros(state.at(name).shape());
  }
  model->load_state_dict(zeroed);
  EXPECT_GT(max_abs_difference(model->forward(ids).logits, with_bias), 1e-3);
  // Training computes no gradient for it, and no optimizer state can be made for it (not a parameter).
  model->train(true);
  Tensor loss = causal_lm_loss(model->forward(ids), ids, 0.0);
  loss.backward();
  EXPECT_FALSE(model->state_dict().at(bias).grad().defined());
}

TEST(DeepseekV3, ExpertBiasUpdateIsMegatronsRuleOverTheStepsCounts) {
  ModelConfig c = preset("tiny-deepseek-v3");
  c.moe_router_bias_update_rate = 0.01;
  manual_seed(1);
  std::unique_ptr<CausalLM> model = create_model(c);
  manual_seed(2);
  const Tensor tokens = randint(0, c.vocab_size, {2, 17});
  const Tensor ids = tokens.narrow(1, 0, 16).contiguous(), targets = tokens.narrow(1, 1, 16).contiguous();
  auto step = [&] {
    Tensor loss = causal_lm_loss(model->forward(ids), targets, 0.0);
    loss.backward();
    model->zero_grad();
  };
  const std::vector<Router*> routers = model->routers();
  ASSERT_EQ(routers.size(), 2u);
  ASSERT_TRUE(routers[0]->tracks_load());
  EXPECT_EQ(model->state_dict().count("model.layers.1.mlp.gate.tokens_per_expert"), 0u);  // not persistent
  auto load_of = [&](Router* r) {
    return buffers(*model).at(std::string(r->name()) + ".tokens_per_expert").to_vector<float>();
  };
  auto total = [](const std::vector<float>& v) {
    float t = 0;
    for (float x : v) t += x;
    return t;
  };
  step();
  step();  // two micro-batches of 32 tokens, top-2: 128 slots a layer
  std::vector<std::vector<float>> loads, before;
  for (Router* r : routers) {
    loads.push_back(load_of(r));
    before.push_back(r->expert_bias().to_vector<float>());
    EXPECT_EQ(total(loads.back()), 128.0f) << r->name();
  }
  dist::SingleCommunicator single;
  update_expert_biases(*model, single);
  const float mean = 128.0f / float(c.num_experts);
  for (size_t i = 0; i < routers.size(); ++i) {
    const std::vector<float> bias = routers[i]->expert_bias().to_vector<float>();
    int moved = 0;
    for (size_t e = 0; e < bias.size(); ++e) {
      const float by = loads[i][e] < mean ? 0.01f : loads[i][e] > mean ? -0.01f : 0.0f;
      EXPECT_EQ(bias[e], before[i][e] + by) << routers[i]->name() << " expert " << e;  // in f32
      moved += by != 0.0f;
    }
    EXPECT_GT(moved, 0) << routers[i]->name();
    EXPECT_EQ(total(load_of(routers[i])), 0.0f) << routers[i]->name();  // reset
  }
  // The MoE block recomputed in backward: its replay counts nothing again.
  model->set_recompute(
      memory::plan_recompute(testing::RecomputeMode{"moe", "", "", -1, false, -1, false, -1, "moe"}.parse(c), c));
  step();
  for (Router* r : routers) EXPECT_EQ(total(load_of(r)), 64.0f) << r->name();
  model->set_recompute({});
  update_expert_biases(*model, single);
  // Validation forwards (eval mode, no gradients) count nothing.
  model->train(false);
  model->forward(ids);
  model->train(true);
  for (Router* r : routers) EXPECT_EQ(total(load_of(r)), 0.0f) << r->name();
}

TEST(DeepseekV3, MultiTokenPredictionLayersOfACheckpointAreSkipped) {
  const std::string dir = ::testing::TempDir() + "tidal_deepseek_mtp";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kFixture + "/config.json", dir + "/config.json");  // num_nextn_predict_layers 1
  std::map<std::string, Tensor> weights = io::load_safetensors(kFixture + "/model.safetensors").tensors;
  weights["model.layers.3.eh_proj.weight"] = zeros({32, 64});  // the MTP module after the 3 layers
  weights["model.layers.3.mlp.experts.0.up_proj.weight"] = zeros({16, 32});
  io::save_safetensors(dir + "/model.safetensors", weights);
  EXPECT_NO_THROW(load_pretrained_model(dir));
  weights["model.layers.4.eh_proj.weight"] = zeros({32, 64});  // past the MTP layers: not the model's
  io::save_safetensors(dir + "/model.safetensors", weights);
  EXPECT_NE(testing::error_of([&] { load_pretrained_model(dir); }).find("model.layers.4.eh_proj.weight"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tidal::models
