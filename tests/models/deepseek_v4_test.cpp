// DeepSeek-V4 (models/deepseek_v4.h) against transformers' DeepseekV4ForCausalLM on tiny random models
// (tests/fixtures/hf/tiny_deepseek_v4 and tiny_deepseek_v4_hca, scripts/deepseek_v4_fixtures.py): three layers with a
// window shorter than the input (sliding, or heavily compressed around a sliding one), a hash-routed and two top-k MoE
// layers with the SwiGLU clamp crossed, mHC on: the logits, the loss and the gradient of every parameter.
#include <gtest/gtest.h>

// Modes are written as partial aggregates: the fields left out keep their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <filesystem>

#include "tests/models/hf_golden.h"
#include "tests/support/error_of.h"
#include "tests/support/gradcheck.h"
#include "tests/support/recompute_modes.h"
#include "tidal/autograd/checkpoint.h"
#include "tidal/dist/single_communicator.h"
#include "tidal/io/safetensors.h"
#include "tidal/memory/estimator.h"
#include "tidal/models/deepseek_v4_checkpoint.h"
#include "tidal/models/moe.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/loss.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"

namespace tidal::models {
namespace {

// The save, meta and recompute tests run the model with CSA and HCA layers.
const char* kFixture = "tiny_deepseek_v4_csa";

class DeepseekV4Golden : public ::testing::TestWithParam<const char*> {};

// tiny_deepseek_v4: sliding layers; tiny_deepseek_v4_hca: two heavily compressed layers (m' = 4 over 12 tokens,
// their own RoPE base) around a sliding one; tiny_deepseek_v4_csa: CSA, HCA, CSA; tiny_deepseek_v4_yarn: the same
// with YaRN on the compressed layers' rope (as the published checkpoints have it).
// Both attention cores: flash (the default: the window's and HCA's keys through the flash kernel, CSA's gathered)
// and eager (composed ops over every key, as transformers computes it).
constexpr AttentionKernel kKernels[] = {AttentionKernel::flash, AttentionKernel::eager};

TEST_P(DeepseekV4Golden, MatchesTransformersLogitsLossAndEveryGradient) {
  for (const AttentionKernel kernel : kKernels) {
    SCOPED_TRACE(name(kernel));
    const GoldenFiles g = load_golden(GetParam());
    std::unique_ptr<CausalLM> model = load_pretrained_model(g.dir);
    model->set_attention_kernel(kernel);
    ASSERT_TRUE(model->config().is_deepseek_v4());
    const Tensor ids = g.at("ids"), targets = g.at("targets");
    const ModelOutput out = model->forward(ids);
    const double logits_error = relative_error(out.logits, g.at("logits"));
    EXPECT_LE(logits_error, 1e-5);
    Tensor loss = causal_lm_loss(out, targets, 0.0);
    EXPECT_LE(scalar_error(loss, g.at("loss")), 1e-5);
    loss.backward();
    int compared = 0;
    double worst = 0;
    for (const auto& [name, p] : model->named_parameters()) {
      if (name.find(".indexer.") != std::string::npos) {  // the top-k choice carries no gradient, in either
        EXPECT_FALSE(g.has("grad." + name)) << name;
        EXPECT_FALSE(p.grad().defined()) << name;
        continue;
      }
      ASSERT_TRUE(g.has("grad." + name)) << name << " has no golden gradient: a name transformers does not use";
      const double e = relative_error(p.grad(), g.at("grad." + name));
      // A gradient summed with cancellation to near 0 (hc_head.hc_scale: 4.8e-5 in the HCA fixture) is held to its
      // absolute error instead: f32 rounding of the terms, 1e-8 here.
      const double absolute = e * std::sqrt(double(sum(square(g.at("grad." + name))).item<float>()));
      EXPECT_TRUE(e <= 1e-4 || absolute <= 1e-7) << name << ": relative " << e << ", absolute " << absolute;
      worst = std::max(worst, e);
      ++compared;
    }
    EXPECT_EQ(compared, g.count_prefix("grad."));  // every transformers parameter is one of tidal's
    std::printf("%s (%s): logits %.2e, loss %.2e, worst gradient %.2e over %d parameters\n", GetParam(), name(kernel),
                logits_error, scalar_error(loss, g.at("loss")), worst, compared);
  }
}

// Inputs whose last window is incomplete (7 tokens: HCA keeps 1 entry, CSA 3) or that complete none (1 token).
TEST_P(DeepseekV4Golden, ShortInputsMatchTransformers) {
  const GoldenFiles g = load_golden(GetParam());
  std::unique_ptr<CausalLM> model = load_pretrained_model(g.dir);
  NoGradGuard no_grad;
  for (const AttentionKernel kernel : kKernels)
    for (const char* t : {"7", "1"}) {
      model->set_attention_kernel(kernel);
      const double e =
          relative_error(model->forward(g.at(std::string("ids_") + t)).logits, g.at(std::string("logits_") + t));
      EXPECT_LE(e, 1e-5) << t << " tokens, " << name(kernel);
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DeepseekV4Golden,
                         ::testing::Values("tiny_deepseek_v4", "tiny_deepseek_v4_hca", "tiny_deepseek_v4_csa",
                                           "tiny_deepseek_v4_yarn"));

// tidal writes the names transformers writes (DeepSeek's: layers.L.attn.wq_a, ffn.experts.E.w1, hc_attn_fn, ...),
// each tensor as the fixture holds it, and reads its own directory back to the same logits.
TEST(DeepseekV4, SavesTransformersNamesAndLoadsThemBack) {
  const GoldenFiles g = load_golden(kFixture);
  std::unique_ptr<CausalLM> model = load_pretrained_model(g.dir);
  const std::string dir = ::testing::TempDir() + "tidal_deepseek_v4_saved";
  std::filesystem::remove_all(dir);
  save_pretrained(*model, dir);
  const auto theirs = io::load_safetensors(g.dir + "/model.safetensors").tensors;
  const auto ours = io::load_safetensors(dir + "/model.safetensors").tensors;
  ASSERT_EQ(ours.size(), theirs.size());
  for (const auto& [name, t] : theirs) {
    ASSERT_TRUE(ours.count(name)) << name << " is not among the names tidal writes";
    EXPECT_TRUE(testing::bitwise_equal(ours.at(name), t)) << name;
  }
  NoGradGuard no_grad;
  EXPECT_TRUE(testing::bitwise_equal(load_pretrained_model(dir)->forward(g.at("ids")).logits,
                                     model->forward(g.at("ids")).logits));
}

// Expert parallel's read of a Hugging Face file (DeepSeek's per-expert w1/w2/w3): a rank holding experts [2, 4) reads
// only theirs (deepseek_v4_holds) and stacks them into its rows of gate_up_proj / down_proj, equal to the whole
// tensors' rows; without its range the file's first expert missing is an error naming it.
TEST(DeepseekV4, ExpertParallelReadsOnlyItsExperts) {
  const GoldenFiles g = load_golden(kFixture);
  const std::map<std::string, Tensor> file = io::load_safetensors(g.dir + "/model.safetensors").tensors;
  const std::map<std::string, Tensor> whole = deepseek_v4_from_checkpoint(file);
  const ExpertRows rows{2, 2};
  std::map<std::string, Tensor> read;
  size_t skipped = 0;
  for (const auto& [name, t] : file) {
    if (deepseek_v4_holds(rows)(name)) {
      read.emplace(name, t);
    } else {
      ++skipped;
      EXPECT_NE(name.find(".experts."), std::string::npos) << name;
    }
  }
  EXPECT_EQ(skipped, size_t(3 /*layers*/ * 2 /*experts*/ * 3 /*w1 w2 w3*/));
  const std::map<std::string, Tensor> mine = deepseek_v4_from_checkpoint(read, rows);
  ASSERT_EQ(mine.size(), whole.size());
  for (const auto& [name, t] : whole) {
    ASSERT_TRUE(mine.count(name)) << name;
    const bool stacked = name.ends_with(".gate_up_proj") || name.ends_with(".down_proj");
    EXPECT_TRUE(testing::bitwise_equal(mine.at(name), stacked ? t.narrow(0, 2, 2).contiguous() : t)) << name;
  }
  const std::string e = testing::error_of([&] { deepseek_v4_from_checkpoint(read); });
  EXPECT_NE(e.find("the checkpoint has no weights of model.layers.0.mlp.experts.0"), std::string::npos) << e;
}

// --moe-router-enable-expert-bias on V4 (DeepSeek's auxiliary-loss-free balancing): each top-k layer counts the
// tokens its experts got in training forwards (not in a recompute's replay: the moe checkpoint here), and the update
// moves its correction bias by +-rate toward the mean load (Megatron-LM's rule, update_bias_from_load); the hash
// layer has no bias and counts nothing.
TEST(DeepseekV4, ExpertBiasUpdateMovesTheTopKLayersBiasesTowardTheMeanLoad) {
  ModelConfig c = load_pretrained_dir(fixture_dir(kFixture)).config;
  c.moe_router_bias_update_rate = 0.05;
  manual_seed(5);
  std::unique_ptr<CausalLM> model = create_model(c);
  std::vector<LayerRecompute> plan(size_t(c.num_hidden_layers));
  for (LayerRecompute& l : plan) l.moe = true;  // the MoE block replayed in backward
  model->set_recompute(plan);
  Tensor ids = randint(0, c.vocab_size, {2, 12}, DType::i64);
  Tensor loss = causal_lm_loss(model->forward(ids.narrow(1, 0, 11)), ids.narrow(1, 1, 11), 0.0);
  loss.backward();
  std::map<std::string, std::vector<float>> loads;
  for (const auto& [name, b] : model->named_buffers())
    if (name.ends_with(".tokens_per_expert")) loads[name.substr(0, name.rfind('.'))] = b.to_vector<float>();
  ASSERT_EQ(loads.size(), size_t(2));  // layers 1 and 2 (layer 0 is hash-routed)
  for (const auto& [gate, load] : loads) {
    float total = 0;
    for (float x : load) total += x;
    EXPECT_EQ(total, float(2 * 11 * c.num_experts_per_tok)) << gate;  // once, not again in the replay
  }
  dist::SingleCommunicator one;
  update_expert_biases(*model, one);
  for (const auto& [name, b] : model->named_buffers()) {
    if (!name.ends_with(".e_score_correction_bias")) continue;
    const std::vector<float>& load = loads.at(name.substr(0, name.rfind('.')));
    const std::vector<float> bias = b.to_vector<float>();
    const float mean = float(2 * 11 * c.num_experts_per_tok) / float(c.num_experts);
    for (size_t e = 0; e < bias.size(); ++e)
      EXPECT_EQ(bias[e], load[e] < mean ? 0.05f : load[e] > mean ? -0.05f : 0.0f) << name << " " << e;
  }
  for (const auto& [name, b] : model->named_buffers()) {  // the loads start again
    if (name.ends_with(".tokens_per_expert")) {
      EXPECT_EQ(sum(b).item<float>(), 0.0f) << name;
    }
  }
}

// The dry run's device: forward and backward from shapes alone (the MoE's slots go round the experts).
TEST(DeepseekV4, RunsOnTheMetaDevice) {
  const ModelConfig c = load_pretrained_dir(fixture_dir(kFixture)).config;
  nn::Init init;
  init.device = Device::meta();
  std::unique_ptr<CausalLM> model = create_model(c, init);
  EXPECT_EQ(model->num_parameters(), c.parameter_count());
  Tensor tokens = empty({2, 13}, DType::i64, Device::meta());
  Tensor loss = causal_lm_loss(model->forward(tokens.narrow(1, 0, 12)), tokens.narrow(1, 1, 12), 0.0);
  loss.backward();
  for (const auto& [name, p] : model->named_parameters())  // the indexer's: none (its choice is an index)
    EXPECT_TRUE(name.find(".indexer.") != std::string::npos || (p.grad().defined() && p.grad().is_meta())) << name;
}

// What the model does not support yet is refused naming it, not run wrong.
TEST(DeepseekV4, RefusesPackedDocumentsAndMultiTokenPrediction) {
  const GoldenFiles g = load_golden(kFixture);
  std::unique_ptr<CausalLM> model = load_pretrained_model(g.dir);
  const Tensor ids = g.at("ids");
  DocumentLayout docs;
  docs.positions = zeros(ids.shape(), DType::i32);
  std::string e = testing::error_of([&] { model->forward(ids, docs); });
  EXPECT_NE(e.find("packed documents"), std::string::npos) << e;
  e = testing::error_of([&] { model->forward(ids, {}, MtpIds{ids}); });
  EXPECT_NE(e.find("multi-token-prediction inputs for a model of 0 MTP depths"), std::string::npos) << e;
  ModelConfig c = model->config();
  c.mtp_num_layers = 1;
  e = testing::error_of([&] { c.validate(); });
  EXPECT_NE(e.find("--mtp-num-layers"), std::string::npos) << e;
}

// The estimator models V4 (memory/estimator_deepseek_v4.h; exact: estimator_deepseek_v4_test.cpp), expert parallel
// too, and refuses what V4 runs without: context parallelism, LoRA.
TEST(DeepseekV4, TheEstimatorRefusesWhatV4RunsWithout) {
  const ModelConfig c = load_pretrained_dir(fixture_dir(kFixture)).config;
  memory::ActivationInputs in;
  EXPECT_GT(memory::estimate_activations(c, in).peak, 0);
  in.parallel.expert = 2;
  EXPECT_GT(memory::estimate_activations(c, in).peak, 0);
  std::string e;
  in.parallel.expert = 1;
  in.parallel.context = 2;
  in.seq = 4;
  e = testing::error_of([&] { memory::estimate_activations(c, in); });
  EXPECT_NE(e.find("--context-parallel-size"), std::string::npos) << e;
  in.parallel.context = 1;
  in.lora = true;
  e = testing::error_of([&] { memory::estimate_activations(c, in); });
  EXPECT_NE(e.find("LoRA on deepseek_v4"), std::string::npos) << e;
}

// Full recompute (uniform, block, groups of 2) and the core_attn and moe checkpoints: the loss and every gradient
// bit for bit the plain run's.
TEST(DeepseekV4, RecomputeGivesBitwiseIdenticalGradients) {
  for (const AttentionKernel kernel : kKernels) {
    SCOPED_TRACE(name(kernel));
    const GoldenFiles g = load_golden(kFixture);
    std::unique_ptr<CausalLM> model = load_pretrained_model(g.dir);
    model->set_attention_kernel(kernel);
    auto run = [&](const std::vector<LayerRecompute>& plan, std::vector<Tensor>* grads) {
      model->set_recompute(plan);
      Tensor loss = causal_lm_loss(model->forward(g.at("ids")), g.at("targets"), 0.0);
      loss.backward();
      grads->clear();
      for (const Tensor& p : model->parameters()) grads->push_back(p.grad().defined() ? p.grad().clone() : Tensor());
      model->zero_grad();
      return loss.item<double>();
    };
    std::vector<Tensor> plain, again;
    const double base = run({}, &plain);
    using Mode = testing::RecomputeMode;
    const Mode modes[] = {{"full uniform 1", "full", "uniform", 1},
                          {"full uniform 2", "full", "uniform", 2},
                          {"full block 2", "full", "block", 2},
                          {"core_attn", "selective", "", -1, false, -1, false, -1, "core_attn"},
                          {"moe", "selective", "", -1, false, -1, false, -1, "moe"},
                          {"core_attn,moe", "selective", "", -1, false, -1, false, -1, "core_attn,moe"}};
    for (const Mode& m : modes) {
      SCOPED_TRACE(m.name);
      const int64_t replays = autograd::checkpoint_replay_count();
      const double loss = run(memory::plan_recompute(m.parse(model->config()), model->config()), &again);
      EXPECT_GT(autograd::checkpoint_replay_count(), replays);  // something was recomputed
      EXPECT_EQ(loss, base);
      ASSERT_EQ(again.size(), plain.size());
      for (size_t i = 0; i < plain.size(); ++i) {
        ASSERT_EQ(again[i].defined(), plain[i].defined()) << i;
        if (plain[i].defined()) {
          EXPECT_TRUE(testing::bitwise_equal(again[i], plain[i])) << i;
        }
      }
    }
    // What deepseek_v4 does not implement is refused by name, not silently skipped.
    const std::string e = testing::error_of([&] { Mode{"norm", "", "", -1, false, -1, true}.parse(model->config()); });
    EXPECT_NE(e.find("--recompute-norm"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace tidal::models
