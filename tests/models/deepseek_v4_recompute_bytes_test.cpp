// What DeepSeek-V4's own recompute flags take off the activations kept after forward, to the byte: the allocator's
// figure against the formulas of memory/deepseek_v4_savings.h (docs/memory.md, "DeepSeek-V4 layer"), alone, together
// and next to full block recompute, in f32 and bf16, on the CSA/HCA/CSA and HCA/sliding/HCA fixtures, with the
// sequence a multiple of the compression rates and not, and too short for any entry; with the flash core and the
// eager (composed) one.
#include <gtest/gtest.h>

// Modes are written as partial aggregates: the fields left out keep their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include "tests/models/hf_golden.h"
#include "tests/support/recompute_modes.h"
#include "tests/support/recompute_run.h"
#include "tests/support/test_models.h"
#include "tidal/memory/deepseek_v4_savings.h"

namespace tidal::models {
namespace {

using Mode = testing::RecomputeMode;

void check_bytes(const char* fixture, DType dtype, int64_t seq) {
  const ModelConfig c = load_pretrained_dir(fixture_dir(fixture)).config;
  std::unique_ptr<CausalLM> model = testing::seeded_model(c, dtype, 3);
  manual_seed(4);
  const Tensor batch = randint(0, c.vocab_size, {4, seq + 1});
  // {the mode, the same without DeepSeek-V4's flags}
  const std::pair<Mode, Mode> modes[] = {
      {{"csa", "", "", -1, false, -1, false, -1, "", true}, {"none"}},
      {{"mhc", "", "", -1, false, -1, false, -1, "", false, true}, {"none"}},
      {{"csa + mhc", "", "", -1, false, -1, false, -1, "", true, true}, {"none"}},
      {{"full block 1 + csa + mhc", "full", "block", 1, false, -1, false, -1, "", true, true},
       {"full block 1", "full", "block", 1}},
  };
  for (const AttentionKernel kernel : {AttentionKernel::flash, AttentionKernel::eager})
    for (const auto& [mode, base] : modes) {
      SCOPED_TRACE(std::string(fixture) + " " + std::string(dtype_name(dtype)) + " seq " + std::to_string(seq) + " " +
                   mode.name + " " + name(kernel));
      model->set_attention_kernel(kernel);
      const std::vector<LayerRecompute> plan = memory::plan_recompute(mode.parse(c), c);
      model->set_recompute(base.name == "none" ? std::vector<LayerRecompute>{}
                                               : memory::plan_recompute(base.parse(c), c));
      const int64_t before = testing::run_two_micro_batches(*model, batch).saved_after_forward;
      model->set_recompute(plan);
      const int64_t after = testing::run_two_micro_batches(*model, batch).saved_after_forward;
      model->set_recompute({});
      const int64_t formula = memory::deepseek_v4_recompute_saving(c, plan, 2, seq, dtype, kernel);
      EXPECT_GT(formula, 0);
      EXPECT_EQ(before - after, formula) << "kept " << before << " -> " << after;
    }
}

TEST(DeepseekV4RecomputeBytes, CsaFixtureF32) { check_bytes("tiny_deepseek_v4_csa", DType::f32, 24); }
TEST(DeepseekV4RecomputeBytes, CsaFixtureBf16) { check_bytes("tiny_deepseek_v4_csa", DType::bf16, 24); }
TEST(DeepseekV4RecomputeBytes, CsaFixtureIncompleteWindow) { check_bytes("tiny_deepseek_v4_csa", DType::f32, 11); }
TEST(DeepseekV4RecomputeBytes, CsaFixtureNoCompleteWindow) { check_bytes("tiny_deepseek_v4_csa", DType::f32, 1); }
TEST(DeepseekV4RecomputeBytes, HcaFixtureF32) { check_bytes("tiny_deepseek_v4_hca", DType::f32, 24); }
TEST(DeepseekV4RecomputeBytes, HcaFixtureBf16IncompleteWindow) { check_bytes("tiny_deepseek_v4_hca", DType::bf16, 11); }

}  // namespace
}  // namespace tidal::models
