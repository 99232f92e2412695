// LoRA against peft itself (tests/fixtures/lora/, scripts/lora_fixtures.py): a PEFT adapter saved by
// peft loads into tidal and gives peft's logits; ten steps of LoRA training give peft's loss curve; the
// base model's loss on a masked instruction batch is transformers'; a merged model gives the adapted
// model's logits.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/models/hf_golden.h"
#include "tidal/models/peft_adapter.h"
#include "tidal/nn/lora.h"
#include "tidal/ops/loss.h"
#include "tidal/ops/view.h"
#include "tidal/optim/adamw.h"

namespace tidal::models {
namespace {

std::string lora_fixture(const std::string& name) {
  return std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/lora/" + name;
}

struct LoraGolden {
  std::map<std::string, Tensor> t;
  LoraGolden() : t(io::load_safetensors(lora_fixture("golden.safetensors")).tensors) {}
};

// The tiny Qwen3 of the hf fixtures with peft's adapter on it.
std::unique_ptr<CausalLM> adapted_model() {
  std::unique_ptr<CausalLM> model = load_pretrained_model(fixture_dir("tiny_qwen3"));
  const AdapterFiles a = read_adapter_dir(lora_fixture("qwen3_adapter"));
  nn::Init init;
  nn::apply_lora(*model, a.config, init);
  load_adapter_weights(*model, a.weights, "qwen3_adapter");
  return model;
}

// transformers' causal-LM loss: the mean over the labelled targets of labels shifted left.
Tensor lm_loss(const CausalLM& model, const Tensor& ids, const Tensor& labels) {
  return cross_entropy(model.forward(ids).logits, shifted(labels), -100);
}

TEST(LoraPeft, AdapterConfigReadAsPeftWroteIt) {
  const AdapterFiles a = read_adapter_dir(lora_fixture("qwen3_adapter"));
  EXPECT_EQ(a.config.r, 4);
  EXPECT_DOUBLE_EQ(a.config.alpha, 8.0);
  std::vector<std::string> targets = a.config.target_modules;  // peft saves a set: any order
  std::sort(targets.begin(), targets.end());
  EXPECT_EQ(targets, (std::vector<std::string>{"down_proj", "q_proj", "v_proj"}));
  EXPECT_EQ(a.weights.size(), size_t(2 * 3 * 2));  // 2 layers x 3 modules x (A, B)
  EXPECT_TRUE(a.weights.count("model.layers.1.mlp.down_proj.lora_B.weight"));
}

TEST(LoraPeft, BaseLossOnAMaskedBatchIsTransformers) {
  LoraGolden g;
  NoGradGuard no_grad;
  const auto base = load_pretrained_model(fixture_dir("tiny_qwen3"));
  EXPECT_LT(scalar_error(lm_loss(*base, g.t.at("input_ids"), g.t.at("labels")), g.t.at("base_loss")), 1e-6);
}

TEST(LoraPeft, AdaptedLogitsArePefts) {
  LoraGolden g;
  NoGradGuard no_grad;
  const auto model = adapted_model();
  const Tensor logits = model->forward(g.t.at("input_ids")).logits;
  EXPECT_LT(relative_error(logits, g.t.at("logits")), 1e-5);
  // Without the adapters the logits differ: the check above sees them.
  const Tensor plain = load_pretrained_model(fixture_dir("tiny_qwen3"))->forward(g.t.at("input_ids")).logits;
  EXPECT_GT(relative_error(plain, g.t.at("logits")), 1e-2);
}

TEST(LoraPeft, MergedWeightsGiveTheAdaptedLogits) {
  LoraGolden g;
  NoGradGuard no_grad;
  const auto model = adapted_model();
  const auto merged = load_pretrained_model(fixture_dir("tiny_qwen3"));
  merged->load_state_dict(nn::merged_state_dict(*model));
  EXPECT_LT(relative_error(merged->forward(g.t.at("input_ids")).logits, g.t.at("logits")), 1e-5);
}

TEST(LoraPeft, TenStepsFollowPeftsLossCurve) {
  LoraGolden g;
  const auto model = adapted_model();
  const optim::NamedParameters trained = model->named_trainable_parameters();
  ASSERT_EQ(trained.size(), size_t(12));  // the adapters only: the base is frozen
  for (const auto& [name, p] : trained) EXPECT_TRUE(nn::is_lora_parameter(name)) << name;
  optim::AdamW opt(trained, {1e-2, 0.9, 0.95, 1e-8, 0.0});
  const Tensor losses = g.t.at("losses").contiguous();
  const std::map<std::string, Tensor> before = model->state_dict();
  for (int step = 0; step < 10; ++step) {
    model->zero_grad();
    const Tensor loss = lm_loss(*model, g.t.at("input_ids"), g.t.at("labels"));
    const double want = losses.data<float>()[step];
    EXPECT_NEAR(loss.item<float>(), want, 2e-5 * std::abs(want)) << "step " << step;
    loss.backward();
    opt.step();
  }
  for (const char* name :
       {"model.layers.0.self_attn.q_proj.lora_A.weight", "model.layers.1.mlp.down_proj.lora_B.weight"})
    EXPECT_LT(relative_error(model->state_dict().at(name), g.t.at(std::string("trained.") + peft_name(name))), 1e-4)
        << name;
  // The frozen base did not move and got no gradient.
  for (const auto& [name, p] : model->named_parameters()) {
    if (nn::is_lora_parameter(name)) continue;
    EXPECT_FALSE(p.grad().defined()) << name;
    EXPECT_EQ(relative_error(p.detach(), before.at(name)), 0.0) << name;
  }
}

}  // namespace
}  // namespace tidal::models

namespace tidal::models {
namespace {

// GPT-2's Conv1D layers hold W as (in, out): peft saves their adapters with fan_in_fan_out, in the same
// (r, in) / (out, r) shapes as a Linear's; they load into tidal's Conv1D and give peft's logits, merged or not.
TEST(LoraPeft, Gpt2Conv1DAdapterGivesPeftsLogits) {
  const auto golden = io::load_safetensors(lora_fixture("gpt2_golden.safetensors")).tensors;
  NoGradGuard no_grad;
  std::unique_ptr<CausalLM> model = load_pretrained_model(fixture_dir("tiny_gpt2"));
  const AdapterFiles a = read_adapter_dir(lora_fixture("gpt2_adapter"));
  const nn::AppliedLora applied = nn::apply_lora(*model, a.config, nn::Init{});
  EXPECT_TRUE(applied.conv1d);
  load_adapter_weights(*model, a.weights, "gpt2_adapter");
  const Tensor ids = golden.at("input_ids");
  EXPECT_LT(relative_error(model->forward(ids).logits, golden.at("logits")), 1e-5);
  const auto merged = load_pretrained_model(fixture_dir("tiny_gpt2"));
  merged->load_state_dict(nn::merged_state_dict(*model));
  EXPECT_LT(relative_error(merged->forward(ids).logits, golden.at("logits")), 1e-5);
}

}  // namespace
}  // namespace tidal::models
