// DeepSeek-V4's own recompute flags (MindSpeed-LLM's --recompute-csa-attention and --mhc-recompute,
// docs/recompute.md): alone, together and stacked with full block recompute, the core_attn and moe checkpoints and
// activation offload, over two accumulated micro-batches, in f32 and bf16, on the CSA/HCA/CSA and HCA/sliding/HCA
// fixtures: the loss and every parameter's gradient bit for bit the plain run's, with less kept after forward.
#include <gtest/gtest.h>

// Modes are written as partial aggregates: the fields left out keep their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include "tests/models/hf_golden.h"
#include "tests/support/error_of.h"
#include "tests/support/gradcheck.h"
#include "tests/support/recompute_modes.h"
#include "tests/support/recompute_run.h"
#include "tests/support/test_models.h"
#include "tidal/memory/offload.h"
#include "tidal/memory/offload_runner.h"
#include "tidal/ops/random.h"

namespace tidal::models {
namespace {

using Mode = testing::RecomputeMode;

using Result = testing::RecomputeRun;
Result run(CausalLM& model, const Tensor& batch, memory::Offloader* off = nullptr) {
  return testing::run_two_micro_batches(model, batch, off);
}

// The fixture's config with parameters of `dtype` drawn at random (bf16: --bf16's model).
std::unique_ptr<CausalLM> model_of(const char* fixture, DType dtype) {
  // std 0.2: large enough that the indexer's scores differ and the SwiGLU clamp is crossed
  return testing::seeded_model(load_pretrained_dir(fixture_dir(fixture)).config, dtype, 3, 0.2);
}

void check_bitwise(const char* fixture, DType dtype, bool offload) {
  auto model = model_of(fixture, dtype);
  const ModelConfig& c = model->config();
  manual_seed(4);
  const Tensor batch = randint(0, c.vocab_size, {4, 25});
  const Result plain = run(*model, batch);
  const Mode modes[] = {
      {"csa", "", "", -1, false, -1, false, -1, "", true},
      {"mhc", "", "", -1, false, -1, false, -1, "", false, true},
      {"csa + mhc", "", "", -1, false, -1, false, -1, "", true, true},
      {"full block 1 + csa + mhc", "full", "block", 1, false, -1, false, -1, "", true, true},
      {"core_attn + csa + mhc", "selective", "", -1, false, -1, false, -1, "core_attn", true, true},
      {"core_attn,moe + csa + mhc", "selective", "", -1, false, -1, false, -1, "core_attn,moe", true, true},
  };
  for (const Mode& m : modes) {
    const std::string what =
        std::string(fixture) + " " + std::string(dtype_name(dtype)) + " " + m.name + (offload ? " + offload all" : "");
    SCOPED_TRACE(what);
    const std::vector<LayerRecompute> plan = memory::plan_recompute(m.parse(c), c);
    model->set_recompute(plan);
    memory::Offloader off;
    if (offload)
      model->set_layer_runner(
          memory::offload_layer_runner(off, plan, c.num_hidden_layers, memory::parse_offload_policy("all")));
    const Result r = run(*model, batch, offload ? &off : nullptr);
    model->set_layer_runner(nullptr);
    model->set_recompute({});
    EXPECT_GT(r.recomputes, 0);
    EXPECT_LT(r.saved_after_forward, plain.saved_after_forward);
    if (offload) {
      EXPECT_GT(off.stats().offloaded_bytes, 0);
    }
    EXPECT_EQ(r.loss, plain.loss);
    ASSERT_EQ(r.grads.size(), plain.grads.size());
    for (size_t i = 0; i < plain.grads.size(); ++i) {
      ASSERT_EQ(r.grads[i].defined(), plain.grads[i].defined()) << model->named_parameters()[i].first;
      if (plain.grads[i].defined()) {
        EXPECT_TRUE(testing::bitwise_equal(r.grads[i], plain.grads[i])) << model->named_parameters()[i].first;
      }
    }
  }
}

TEST(DeepseekV4Recompute, CsaFixtureBitwise) { check_bitwise("tiny_deepseek_v4_csa", DType::f32, false); }
TEST(DeepseekV4Recompute, HcaFixtureBitwise) { check_bitwise("tiny_deepseek_v4_hca", DType::f32, false); }
TEST(DeepseekV4Recompute, Bf16CsaFixtureBitwise) { check_bitwise("tiny_deepseek_v4_csa", DType::bf16, false); }
TEST(DeepseekV4Recompute, Bf16HcaFixtureBitwise) { check_bitwise("tiny_deepseek_v4_hca", DType::bf16, false); }
TEST(DeepseekV4Recompute, OffloadCsaFixtureBitwise) { check_bitwise("tiny_deepseek_v4_csa", DType::f32, true); }

}  // namespace
}  // namespace tidal::models
