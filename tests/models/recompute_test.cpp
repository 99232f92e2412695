// Every recompute mode and allowed combination, on every architecture: the loss and every gradient
// are bitwise identical to the run without recompute (the same kernels run in the same order on the
// same values), with dropout and with gradient accumulation over two micro-batches; in f32 and with
// bf16 parameters (--bf16's model: bf16 activations and gradients).
#include <gtest/gtest.h>

// Modes are written as partial aggregates: the fields left out keep their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include "tests/support/gradcheck.h"
#include "tests/support/recompute_modes.h"
#include "tests/support/recompute_run.h"
#include "tests/support/test_models.h"
#include "tidal/autograd/checkpoint.h"
#include "tidal/autograd/checkpoint_without_output.h"
#include "tidal/models/causal_lm.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/random.h"

namespace tidal::models {
namespace {

using Mode = testing::RecomputeMode;

memory::RecomputeConfig parse(const Mode& m, const ModelConfig& c) { return m.parse(c); }

std::vector<Mode> modes(bool moe, bool mla) {
  std::vector<Mode> v = {
      {"full uniform 1", "full", "uniform", 1},
      {"full uniform 2", "full", "uniform", 2},
      {"full block 1", "full", "block", 1},
      {"full block 1 + activation 1", "full", "block", 1, true, 1},
      {"full block 1 + norm", "full", "block", 1, false, -1, true},
      {"selective", "selective"},
      {"modules core_attn,norm", "", "", -1, false, -1, false, -1, "core_attn,norm"},
      {"activation", "", "", -1, true},
      {"norm", "", "", -1, false, -1, true},
      {"activation + norm 1", "", "", -1, true, -1, true, 1},
  };
  if (moe) {
    v.push_back({"modules moe", "", "", -1, false, -1, false, -1, "moe"});
    v.push_back({"modules moe_act,mlp", "", "", -1, false, -1, false, -1, "moe_act,mlp"});
  } else {
    v.push_back({"modules mlp", "", "", -1, false, -1, false, -1, "mlp"});
  }
  if (mla) {  // DeepSeek's up-projections alone, and with every other module
    v.push_back({"modules mla_up_proj", "", "", -1, false, -1, false, -1, "mla_up_proj"});
    v.push_back(
        {"modules mla_up_proj,core_attn,norm,moe", "", "", -1, false, -1, false, -1, "mla_up_proj,core_attn,norm,moe"});
  }
  return v;
}

using Result = testing::RecomputeRun;
Result run(CausalLM& model, const Tensor& batch) { return testing::run_two_micro_batches(model, batch); }

void check_all_modes(const char* preset_name, AttentionKernel kernel, DType dtype = DType::f32) {
  auto model = testing::make_test_model(preset_name, 3, kernel, dtype);
  const ModelConfig& c = model->config();
  manual_seed(2);
  Tensor batch = randint(0, c.vocab_size, {4, 13});
  const Result plain = run(*model, batch);
  for (const Mode& m : modes(c.is_moe(), c.is_mla())) {
    model->set_recompute(memory::plan_recompute(parse(m, c), c));
    const Result r = run(*model, batch);
    model->set_recompute({});
    EXPECT_EQ(r.loss, plain.loss) << preset_name << ": " << m.name;
    // The mode really ran: it recomputed something and kept less after the forward pass, except core
    // attention under the flash kernel, which keeps no (T, T) tensor and so has nothing to drop.
    const bool noop = m.name == "selective" && kernel == AttentionKernel::flash;
    EXPECT_EQ(r.recomputes > 0, !noop) << preset_name << ": " << m.name;
    if (noop) {
      EXPECT_EQ(r.saved_after_forward, plain.saved_after_forward) << preset_name << ": " << m.name;
    } else {
      EXPECT_LT(r.saved_after_forward, plain.saved_after_forward) << preset_name << ": " << m.name;
    }
    for (size_t i = 0; i < plain.grads.size(); ++i) {
      ASSERT_EQ(plain.grads[i].defined(), r.grads[i].defined()) << preset_name << ": " << m.name << " param " << i;
      if (plain.grads[i].defined()) {
        EXPECT_TRUE(testing::bitwise_equal(r.grads[i], plain.grads[i]))
            << preset_name << ": " << m.name << " param " << model->named_parameters()[i].first;
      }
    }
  }
}

}  // namespace

TEST(Recompute, Gpt2BitwiseEveryModeEager) { check_all_modes("tiny-gpt2", AttentionKernel::eager); }
TEST(Recompute, Gpt2BitwiseEveryModeFlash) { check_all_modes("tiny-gpt2", AttentionKernel::flash); }
TEST(Recompute, LlamaBitwiseEveryMode) { check_all_modes("tiny-llama", AttentionKernel::eager); }
TEST(Recompute, Qwen3BitwiseEveryMode) { check_all_modes("tiny-qwen3", AttentionKernel::eager); }
TEST(Recompute, Qwen3MoeBitwiseEveryMode) { check_all_modes("tiny-qwen3-moe", AttentionKernel::eager); }
TEST(Recompute, MistralSlidingWindowBitwiseEveryModeEager) { check_all_modes("tiny-mistral", AttentionKernel::eager); }
TEST(Recompute, MistralSlidingWindowBitwiseEveryModeFlash) { check_all_modes("tiny-mistral", AttentionKernel::flash); }
TEST(Recompute, Qwen2BiasesBitwiseEveryMode) { check_all_modes("tiny-qwen2", AttentionKernel::eager); }
TEST(Recompute, Gemma3BitwiseEveryModeEager) { check_all_modes("tiny-gemma3", AttentionKernel::eager); }
TEST(Recompute, Gemma3BitwiseEveryModeFlash) { check_all_modes("tiny-gemma3", AttentionKernel::flash); }
TEST(Recompute, DeepseekV3BitwiseEveryModeEager) { check_all_modes("tiny-deepseek-v3", AttentionKernel::eager); }
TEST(Recompute, DeepseekV3BitwiseEveryModeFlash) { check_all_modes("tiny-deepseek-v3", AttentionKernel::flash); }
TEST(Recompute, Bf16Gpt2BitwiseEveryModeFlash) { check_all_modes("tiny-gpt2", AttentionKernel::flash, DType::bf16); }
TEST(Recompute, Bf16LlamaBitwiseEveryMode) { check_all_modes("tiny-llama", AttentionKernel::eager, DType::bf16); }
TEST(Recompute, Bf16Qwen3MoeBitwiseEveryMode) {
  check_all_modes("tiny-qwen3-moe", AttentionKernel::eager, DType::bf16);
}

TEST(Recompute, FlagRulesAreEnforced) {
  const ModelConfig dense = preset("tiny-llama");
  const ModelConfig moe = preset("tiny-qwen3-moe");
  auto error = [&](const Mode& m, const ModelConfig& c) {
    try {
      parse(m, c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error({"", "full"}, dense).find("needs --recompute-method"), std::string::npos);
  EXPECT_NE(error({"", "full", "uniform"}, dense).find("1 <= N <= 2"), std::string::npos);
  EXPECT_NE(error({"", "full", "uniform", 3}, dense).find("1 <= N <= 2"), std::string::npos);
  EXPECT_NE(error({"", "selective", "", 1}, dense).find("selective takes no N"), std::string::npos);
  EXPECT_NE(error({"", "selective", "block"}, dense).find("selective takes no method"), std::string::npos);
  EXPECT_NE(error({"", "", "block", 1}, dense).find("only for --recompute-granularity full"), std::string::npos);
  EXPECT_NE(error({"", "", "", -1, true, 3}, dense).find("must be in [0, 2]"), std::string::npos);
  EXPECT_NE(error({"", "", "", -1, false, -1, false, 1}, dense).find("needs --recompute-norm"), std::string::npos);
  EXPECT_NE(error({"", "full", "uniform", 1, true}, dense).find("needs --recompute-method block"), std::string::npos);
  EXPECT_NE(error({"", "selective", "", -1, false, -1, true}, dense).find("cannot be combined"), std::string::npos);
  EXPECT_NE(error({"", "", "", -1, false, -1, false, -1, "moe_act"}, dense).find("no mixture-of-experts"),
            std::string::npos);
  EXPECT_NE(error({"", "", "", -1, false, -1, false, -1, "attention"}, dense).find("unknown module"),
            std::string::npos);
  EXPECT_NE(error({"", "full", "block", 1, false, -1, false, -1, "mlp"}, dense).find("not full"), std::string::npos);
  EXPECT_EQ(error({"", "", "", -1, false, -1, false, -1, "moe"}, moe), "no error");
  EXPECT_EQ(error({"", "", "", -1, true, 0}, dense), "no error");  // 0 layers is allowed
}

TEST(Recompute, PlansFollowMindSpeedsLayerChoice) {
  ModelConfig c = preset("tiny-llama");
  c.set_num_layers(6);
  auto plan = memory::plan_recompute(parse({"", "full", "block", 2, true, 2, true, 3}, c), c);
  for (int64_t l = 0; l < 6; ++l) {
    EXPECT_EQ(plan[size_t(l)].full, l < 2) << l;
    EXPECT_EQ(plan[size_t(l)].activation, l >= 2 && l < 4) << l;  // the next M = 2 layers
    EXPECT_EQ(plan[size_t(l)].norm, l >= 2 && l < 5) << l;        // the next 3
  }
  plan = memory::plan_recompute(parse({"", "full", "uniform", 4}, c), c);
  EXPECT_TRUE(plan[0].group_start && plan[4].group_start && !plan[1].group_start);
  EXPECT_EQ(plan[0].group_size, 4);
  EXPECT_EQ(plan[4].group_size, 2);  // the last group is what is left
}

}  // namespace tidal::models
