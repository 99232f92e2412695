// DeepSeek-V4 in the planner: the estimator's activations (memory/estimator_deepseek_v4.h) against the dry run's, to
// the byte, per layer, outside the layers and at the peak, under every recompute setting it accepts, offload, bf16
// and chunked loss, with the sequence a multiple of the compression rates and not; the recompute ladder with its own
// flags and nothing it refuses; and tidal plan's search under a budget choosing a candidate whose dry run fits.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "tests/integration/train_helpers.h"
#include "tidal/memory/estimator.h"
#include "tidal/plan/candidates.h"
#include "tidal/plan/device_profile.h"
#include "tidal/plan/dry_run.h"
#include "tidal/plan/report.h"
#include "tidal/plan/search.h"
#include "tidal/plan/step_peak.h"

namespace tidal::train {
namespace {

std::string fixture(const char* name) { return std::string(TIDAL_SOURCE_DIR "/tests/fixtures/hf/") + name; }

// A fixture's config on mock data: micro-batches of 2 x `seq` tokens, one per step.
std::vector<std::string> v4(const char* name, int64_t seq, const std::vector<std::string>& more) {
  return with({"--config", fixture(name) + "/config.json", "--mock-data", "--seq-length", std::to_string(seq),
               "--micro-batch-size", "2", "--global-batch-size", "2", "--train-iters", "2", "--lr-warmup-iters", "0",
               "--eval-interval", "0", "--log-interval", "100"},
              more);
}

const std::vector<std::vector<std::string>>& features() {
  static const std::vector<std::vector<std::string>> all = {
      {},
      {"--bf16"},
      {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"},
      {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "2"},
      {"--recompute-granularity", "selective", "--recompute-modules", "core_attn"},
      {"--recompute-granularity", "selective", "--recompute-modules", "moe"},
      {"--recompute-csa-attention"},
      {"--mhc-recompute"},
      {"--recompute-csa-attention", "--mhc-recompute", "--bf16"},
      {"--recompute-granularity", "selective", "--recompute-modules", "core_attn,moe", "--mhc-recompute"},
      {"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "1",
       "--recompute-csa-attention", "--mhc-recompute"},
      {"--activation-offload"},
      {"--activation-offload", "--offload-policy", "layer-input", "--recompute-granularity", "full",
       "--recompute-method", "uniform", "--recompute-num-layers", "1"},
      {"--activation-offload", "--offload-policy", "min-bytes=1024", "--mhc-recompute"},
      {"--loss-compute-mode", "chunk", "--loss-chunk-size", "8"},
      {"--attention", "eager"},  // the composed core (the default is flash)
      {"--attention", "eager", "--recompute-csa-attention", "--recompute-granularity", "selective",
       "--recompute-modules", "core_attn"},
  };
  return all;
}

void expect_estimator_is_the_dry_run(const char* name, int64_t seq) {
  for (const std::vector<std::string>& f : features()) {
    const std::vector<std::string> flags = v4(name, seq, f);
    SCOPED_TRACE(joined(flags));
    TrainArgs a;
    try {
      a = parse_train_args(flags);
    } catch (const Error& e) {  // --recompute-csa-attention without a compressed layer
      EXPECT_NE(std::string(e.what()).find("compressed"), std::string::npos) << e.what();
      continue;
    }
    const plan::DryRun dry = plan::dry_run(a);
    const plan::TriageSettings s = plan::triage_settings(a);
    const memory::ActivationEstimate e = memory::estimate_activations(
        a.model,
        memory::activation_inputs(a.memory, a.micro_batch_size, a.seq_length, s.attention, s.precision.param_dtype()));
    // The embedding keeps its ids, a view of the (B, T + 1) batch: B x 8 bytes more than the estimator's (B, T), as
    // for every family (dry_run_test.cpp).
    const int64_t batch_view = a.micro_batch_size * 8;
    if (!a.memory.offload.enabled) {  // with offload, what a layer keeps on the device is what offload leaves
      EXPECT_EQ(dry.activation_bytes_per_layer, e.layer_kept);
    }
    EXPECT_EQ(dry.activation_bytes_outside_layers, e.outside_layers + batch_view);
    EXPECT_EQ(dry.device[MemoryCategory::activation].peak, e.peak + batch_view) << "predicted at " << e.peak_at;
    const plan::StepPeak p = plan::predict_step_peak(a.model, s);
    EXPECT_EQ(p.activations, e.peak);
    // The whole step's prediction (parameters, gradients, temporaries beside the activations) is not exact: on these
    // tiny models it is 0.91-1.18 of the dry run's peak (docs/memory.md).
    if (std::getenv("TIDAL_ESTIMATOR_VERBOSE"))
      std::printf("%-22s seq %2lld %-60s step peak predicted %lld, dry run %lld (%.4f)\n", name, (long long)seq,
                  joined(f).c_str(), (long long)p.total, (long long)dry.device.peak_allocated,
                  double(p.total) / double(dry.device.peak_allocated));
  }
}

TEST(DryRun, DeepSeekV4EstimatorIsTheDryRunsActivationsCsa) {
  for (const int64_t seq : {12, 7, 24}) expect_estimator_is_the_dry_run("tiny_deepseek_v4_csa", seq);
}
TEST(DryRun, DeepSeekV4EstimatorIsTheDryRunsActivationsHcaSlidingYarn) {
  expect_estimator_is_the_dry_run("tiny_deepseek_v4_hca", 12);
  expect_estimator_is_the_dry_run("tiny_deepseek_v4_hca", 7);
  expect_estimator_is_the_dry_run("tiny_deepseek_v4", 12);
  expect_estimator_is_the_dry_run("tiny_deepseek_v4_yarn", 7);
}

// The ladder has DeepSeek-V4's flags where the model has their layers (mHC always, --recompute-csa-attention with a
// compressed layer) and nothing the model refuses; the candidates keep to one context rank and offer expert
// parallelism (every E dividing the experts and the ranks).
TEST(PlanCandidates, DeepSeekV4LadderHasItsFlagsAndNothingItRefuses) {
  for (const char* name : {"tiny_deepseek_v4_csa", "tiny_deepseek_v4_hca", "tiny_deepseek_v4"}) {
    SCOPED_TRACE(name);
    const TrainArgs given = parse_train_args(v4(name, 16, {}));
    bool csa = false, mhc = false, core = false;
    for (const memory::RecomputeConfig& c : plan::recompute_ladder(given.model, AttentionKernel::flash)) {
      EXPECT_NO_THROW(memory::validate_recompute(c, given.model)) << c.describe();
      EXPECT_FALSE(c.activation_function || c.norm) << c.describe();
      csa |= c.csa_attention;
      mhc |= c.mhc;
      core |= std::find(c.modules.begin(), c.modules.end(), memory::RecomputeModule::core_attn) != c.modules.end();
    }
    EXPECT_TRUE(mhc && core);
    EXPECT_EQ(csa, std::string(name) != "tiny_deepseek_v4");  // its layers are all sliding
    TrainArgs ranks = given;
    ranks.parallel.world = 2;
    ranks.global_batch_size = 4;
    std::set<int> experts;
    for (const plan::CandidateConfig& c : plan::enumerate_candidates(ranks)) {
      experts.insert(c.args.parallel.expert);
      EXPECT_EQ(c.args.parallel.context, 1) << c.flags;
    }
    EXPECT_EQ(experts, (std::set<int>{1, 2}));
  }
}

// tidal plan's search on the CSA/HCA/CSA fixture under budgets the given run does not fit: it chooses a candidate
// whose dry run fits, DeepSeek-V4's flags are among the candidates, and at half the given peak the choice uses one.
TEST(PlanSearch, DeepSeekV4ATightBudgetChoosesACandidateWhoseDryRunFits) {
  const TrainArgs given = parse_train_args(v4("tiny_deepseek_v4_csa", 64, {}));
  const int64_t need = plan::dry_run(given).device.peak_allocated;
  for (const int64_t budget : {need * 4 / 5, need / 2}) {
    plan::SearchOptions o;
    o.budget = budget;
    o.profile = plan::load_device_profile("h100");
    const plan::PlanSearch s = plan::search_plans(given, o);
    const std::string text = plan::format_plan_search(s, given, o);
    EXPECT_FALSE(s.given.fits);
    ASSERT_GE(s.chosen, 0) << text;
    const plan::PlanCandidate& c = s.candidates[size_t(s.chosen)];
    ASSERT_TRUE(c.exact);
    EXPECT_EQ(c.device_peak, plan::dry_run(c.args).device.peak_allocated);
    EXPECT_LE(c.device_peak, s.target);
    bool csa = false, mhc = false;
    for (const plan::PlanCandidate& x : s.candidates) {
      csa |= x.flags.find("--recompute-csa-attention") != std::string::npos;
      mhc |= x.flags.find("--mhc-recompute") != std::string::npos;
      EXPECT_EQ(x.args.parallel.expert * x.args.parallel.context, 1) << x.flags;
    }
    EXPECT_TRUE(csa && mhc);
    if (budget == need / 2) {
      EXPECT_TRUE(c.args.memory.recompute.csa_attention || c.args.memory.recompute.mhc) << text;
    }
  }
}

}  // namespace
}  // namespace tidal::train
