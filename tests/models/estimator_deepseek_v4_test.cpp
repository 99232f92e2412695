// The estimator's DeepSeek-V4 (memory/estimator_deepseek_v4.h) against the allocator, to the byte: the activation
// peak of a training step and the bytes held after forward, on the tiny fixtures (sliding/HCA/CSA layers, hash and
// top-k MoE, mHC, YaRN), in f32 and bf16, at sequences that fill the compression windows, leave part of one and
// make no entry, under every recompute setting DeepSeek-V4 accepts, with the flash core and the eager (composed) one.
// The real run routes its tokens by value, the
// estimator evenly: what the MoE saves is linear in each expert's rows, so its total does not depend on the routing.
#include <gtest/gtest.h>

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include "tests/models/hf_golden.h"
#include "tests/support/activation_measure.h"
#include "tests/support/recompute_modes.h"
#include "tests/support/test_models.h"
#include "tidal/memory/deepseek_v4_savings.h"
#include "tidal/memory/estimator.h"
#include "tidal/ops/random.h"

namespace tidal::models {
namespace {

using Mode = testing::RecomputeMode;

using Measured = testing::MeasuredActivations;

const std::vector<Mode>& modes() {
  static const std::vector<Mode> all = {
      {"none"},
      {"full uniform 1", "full", "uniform", 1},
      {"full uniform 2", "full", "uniform", 2},
      {"full block 1", "full", "block", 1},
      {"core_attn", "selective", "", -1, false, -1, false, -1, "core_attn"},
      {"moe", "selective", "", -1, false, -1, false, -1, "moe"},
      {"core_attn,moe", "selective", "", -1, false, -1, false, -1, "core_attn,moe"},
      {"csa", "", "", -1, false, -1, false, -1, "", true},
      {"mhc", "", "", -1, false, -1, false, -1, "", false, true},
      {"csa + mhc", "", "", -1, false, -1, false, -1, "", true, true},
      {"core_attn + mhc", "selective", "", -1, false, -1, false, -1, "core_attn", false, true},
      {"moe + csa + mhc", "selective", "", -1, false, -1, false, -1, "moe", true, true},
      {"full block 1 + csa + mhc", "full", "block", 1, false, -1, false, -1, "", true, true},
  };
  return all;
}

void check(const char* fixture, DType dtype, int64_t seq) {
  const ModelConfig c = load_pretrained_dir(fixture_dir(fixture)).config;
  std::unique_ptr<CausalLM> model = testing::seeded_model(c, dtype, 1);
  manual_seed(2);
  const int64_t b = 2;
  const Tensor tokens = randint(0, c.vocab_size, {b, seq + 1});
  bool compressed = false;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) compressed = compressed || c.is_compressed(l);
  for (const AttentionKernel kernel : {AttentionKernel::flash, AttentionKernel::eager})
    for (const Mode& m : modes()) {
      if (m.csa && !compressed) continue;  // refused: no compressed layer
      SCOPED_TRACE(std::string(fixture) + " " + std::string(dtype_name(dtype)) + " seq " + std::to_string(seq) + " " +
                   m.name + " " + name(kernel));
      model->set_attention_kernel(kernel);
      const std::vector<LayerRecompute> plan = memory::plan_recompute(m.parse(c), c);
      model->set_recompute(m.name == "none" ? std::vector<LayerRecompute>{} : plan);
      manual_seed(3);
      const Measured got = testing::measure_activations(*model, tokens);
      model->set_recompute({});
      memory::ActivationInputs in;
      in.batch = b;
      in.seq = seq;
      in.plan = plan;
      in.dtype = dtype;
      in.kernel = kernel;
      const memory::ActivationEstimate est = memory::estimate_activations(c, in);
      EXPECT_EQ(est.after_forward, got.after_forward);
      EXPECT_EQ(est.peak, got.peak) << "predicted at " << est.peak_at;
      if (!m.csa && !m.mhc) continue;
      // What DeepSeek-V4's flags take off each layer is memory/deepseek_v4_savings.h's formula.
      Mode without = m;
      without.csa = without.mhc = false;
      in.plan =
          without.granularity.empty() ? std::vector<LayerRecompute>{} : memory::plan_recompute(without.parse(c), c);
      const memory::ActivationEstimate base = memory::estimate_activations(c, in);
      for (int64_t l = 0; l < c.num_hidden_layers; ++l)
        EXPECT_EQ(base.layer_kept[size_t(l)] - est.layer_kept[size_t(l)],
                  (plan[size_t(l)].csa_attention ? memory::csa_attention_saving(c, l, b, seq, dtype, kernel) : 0) +
                      (plan[size_t(l)].mhc ? memory::mhc_saving(c, b, seq, dtype) : 0))
            << "layer " << l;
    }
}

TEST(EstimatorDeepseekV4, SlidingHcaCsaF32) {
  for (const int64_t seq : {12, 7, 1}) check("tiny_deepseek_v4", DType::f32, seq);
}
TEST(EstimatorDeepseekV4, CsaF32) {
  for (const int64_t seq : {12, 7, 24}) check("tiny_deepseek_v4_csa", DType::f32, seq);
}
TEST(EstimatorDeepseekV4, CsaBf16) {
  for (const int64_t seq : {12, 7}) check("tiny_deepseek_v4_csa", DType::bf16, seq);
}
TEST(EstimatorDeepseekV4, HcaF32) {
  for (const int64_t seq : {12, 7, 24}) check("tiny_deepseek_v4_hca", DType::f32, seq);
}
TEST(EstimatorDeepseekV4, HcaBf16) { check("tiny_deepseek_v4_hca", DType::bf16, 7); }
TEST(EstimatorDeepseekV4, YarnF32) {
  for (const int64_t seq : {12, 7}) check("tiny_deepseek_v4_yarn", DType::f32, seq);
}

}  // namespace
}  // namespace tidal::models
