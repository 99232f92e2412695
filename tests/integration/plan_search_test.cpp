// tidal plan's search (tidal/plan/search.h): candidates, the exact fit, the fastest that fits.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "tests/integration/plan_args.h"
#include "tidal/base/error.h"
#include "tidal/memory_stats.h"
#include "tidal/plan/candidates.h"
#include "tidal/plan/device_profile.h"
#include "tidal/plan/dry_run.h"
#include "tidal/plan/report.h"
#include "tidal/plan/search.h"
#include "tidal/train/memory_flags.h"

namespace tidal::train {
namespace {

train::TrainArgs args(std::vector<std::string> extra) { return test::small_gpt2_plan_args(std::move(extra)); }

plan::SearchOptions options(int64_t budget) {
  plan::SearchOptions o;
  o.budget = budget;
  o.profile = plan::load_device_profile("a100");  // PCIe Gen4: offload copies are not all hidden
  return o;
}

TEST(PlanCandidates, TheLadderClimbsFromNothingToEveryLayer) {
  const models::ModelConfig m = models::preset("gpt2-124m");
  const std::vector<memory::RecomputeConfig> ladder = plan::recompute_ladder(m, AttentionKernel::flash);
  ASSERT_GE(ladder.size(), 15u);
  EXPECT_FALSE(ladder.front().any());
  memory::RecomputeConfig act;
  act.activation_function = true;
  EXPECT_EQ(ladder[1], act);
  int blocks = 0, uniform = 0;
  for (const memory::RecomputeConfig& c : ladder) {
    blocks += c.method == memory::RecomputeMethod::block;
    uniform += c.method == memory::RecomputeMethod::uniform;
  }
  EXPECT_EQ(blocks, 11);  // block 1 .. 11 of 12 layers; uniform 1 recomputes all 12
  EXPECT_EQ(uniform, 3);  // groups of 1, 2 and 4 layers
  EXPECT_EQ(ladder.back().method, memory::RecomputeMethod::uniform);
}

TEST(PlanCandidates, EveryCandidateIsAValidDistinctRunOfTheSameGlobalBatch) {
  const train::TrainArgs given = args({"--attention", "eager"});
  const std::vector<plan::CandidateConfig> all = plan::enumerate_candidates(given);
  ASSERT_GT(all.size(), 100u);
  EXPECT_EQ(all.front().flags, "");
  std::set<std::string> seen;
  bool flash = false, smaller = false, larger = false, core_attn_offload = false, swap4 = false;
  std::set<int64_t> chunks;
  for (size_t i = 1; i < all.size(); ++i) {
    const train::TrainArgs& a = all[i].args;
    EXPECT_TRUE(seen.insert(all[i].flags).second) << all[i].flags;
    EXPECT_EQ(a.global_batch_size, 8);
    EXPECT_EQ(a.global_batch_size % a.micro_batch_size, 0);
    // The memory flags say exactly the configuration (and tidal train accepts them).
    EXPECT_EQ(train::parse_memory_config(train::memory_config_flags(a.memory), a.model), a.memory) << all[i].flags;
    flash |= a.attention == AttentionKernel::flash;
    swap4 |= a.memory.swap_optimizer.on && a.memory.swap_optimizer.times == 4;
    if (a.memory.loss.chunked && a.micro_batch_size == 4) chunks.insert(a.memory.loss.chunk_size);
    smaller |= a.micro_batch_size < 4;
    larger |= a.micro_batch_size > 4;
    if (a.memory.offload.enabled && a.memory.offload.policy.kind == memory::OffloadPolicyKind::core_attn) {
      core_attn_offload = true;
      for (const memory::LayerRecompute& l : a.memory.recompute_plan) EXPECT_FALSE(l.full) << all[i].flags;
    }
  }
  EXPECT_TRUE(flash && smaller && larger && core_attn_offload && swap4);
  EXPECT_EQ(chunks, (std::set<int64_t>{128, 256}));  // 4 x 128 tokens: a quarter and a half
}

TEST(PlanSearch, WithRoomToSpareTheFastestCandidateIsChosenAndFitsExactly) {
  const train::TrainArgs given = args({});
  const plan::PlanSearch s = plan::search_plans(given, options(int64_t(64) << 30));
  ASSERT_GE(s.chosen, 0);
  const plan::PlanCandidate& c = s.candidates[size_t(s.chosen)];
  EXPECT_TRUE(c.exact && c.fits);
  for (const plan::PlanCandidate& x : s.candidates)
    if (x.fits) {
      EXPECT_GE(x.time.total_s, c.time.total_s) << x.flags;
    }
  EXPECT_LE(c.time.total_s, s.given.time.total_s);
  EXPECT_TRUE(s.given.exact);
  EXPECT_EQ(s.given.device_peak, plan::dry_run(given).device.peak_allocated);
}

TEST(PlanSearch, ATightBudgetChoosesTheFastestCandidateWhoseDryRunFits) {
  const train::TrainArgs given = args({});
  const int64_t need = plan::dry_run(given).device.peak_allocated;
  const plan::SearchOptions o = options(need * 3 / 4);  // target: 0.675 of what the run needs as given
  const plan::PlanSearch s = plan::search_plans(given, o);
  EXPECT_FALSE(s.given.fits);
  ASSERT_GE(s.chosen, 0) << plan::format_plan_search(s, given, o);
  const plan::PlanCandidate& c = s.candidates[size_t(s.chosen)];
  ASSERT_TRUE(c.exact);
  EXPECT_EQ(c.device_peak, plan::dry_run(c.args).device.peak_allocated);  // the dry run's peak, to the byte
  EXPECT_LE(c.device_peak, s.target);
  EXPECT_FALSE(c.flags.empty());
  // Nothing timed that fits exactly is faster.
  for (const plan::PlanCandidate& x : s.candidates)
    if (x.fits && x.exact) {
      EXPECT_GE(x.time.total_s, c.time.total_s) << x.flags;
    }
  // The Pareto front: sorted by time, each member smaller than every faster candidate.
  int64_t smallest = INT64_MAX;
  for (const plan::PlanCandidate& x : s.candidates) {
    EXPECT_EQ(x.pareto, x.device_peak < smallest) << x.flags;
    smallest = std::min(smallest, x.device_peak);
  }
  const std::string text = plan::format_plan_search(s, given, o);
  EXPECT_NE(text.find("Chosen, the fastest that fits: " + c.flags), std::string::npos) << text;
  const nlohmann::json j = plan::plan_search_json(s, o);
  EXPECT_EQ(j["chosen"]["flags"], c.flags);
  EXPECT_EQ(j["chosen"]["device_peak_bytes"], c.device_peak);
  EXPECT_EQ(j["given"]["fits"], false);
  EXPECT_EQ(j["candidates"].size(), s.candidates.size());
}

TEST(PlanSearch, ItsProgressGoesThroughThePhasesInOrderAndEndsWithTheResultsCounts) {
  const train::TrainArgs given = args({});
  plan::SearchOptions o = options(plan::dry_run(given).device.peak_allocated * 3 / 4);
  std::vector<plan::SearchProgress> seen;
  o.progress = [&seen](const plan::SearchProgress& p) { seen.push_back(p); };
  const plan::PlanSearch s = plan::search_plans(given, o);
  ASSERT_GE(seen.size(), 4u);
  using Phase = plan::SearchProgress::Phase;
  for (size_t i = 1; i < seen.size(); ++i) {  // never back to an earlier phase; counts only grow
    EXPECT_LE(int(seen[i - 1].phase), int(seen[i].phase)) << i;
    EXPECT_LE(seen[i - 1].estimated, seen[i].estimated) << i;
    EXPECT_LE(seen[i - 1].dry_runs, seen[i].dry_runs) << i;
    EXPECT_LE(seen[i - 1].timed, seen[i].timed) << i;
  }
  EXPECT_EQ(seen.front().phase, Phase::estimate);
  EXPECT_EQ(seen.front().candidates, s.enumerated);
  const plan::SearchProgress& last = seen.back();
  EXPECT_EQ(last.phase, Phase::done);
  EXPECT_EQ(
      std::count_if(seen.begin(), seen.end(), [](const plan::SearchProgress& p) { return p.phase == Phase::done; }), 1);
  EXPECT_EQ(last.estimated, s.enumerated);  // every candidate, the given one first
  EXPECT_EQ(last.dry_runs, s.dry_runs);
  EXPECT_EQ(last.timed, int64_t(s.candidates.size()));
  EXPECT_GT(last.checks, 0);
  EXPECT_LE(last.considered, last.may_fit);
  EXPECT_GT(last.may_fit, 0);
  EXPECT_GE(last.estimate_s, 0);
  EXPECT_GT(last.time_s, 0);
  // "Fastest so far": a timed candidate's time and flags.
  ASSERT_GE(s.chosen, 0);
  EXPECT_GT(last.best_s, 0);
  EXPECT_FALSE(last.best_flags.empty());
  bool best_timed = false;
  for (const plan::PlanCandidate& c : s.candidates)
    best_timed |= c.time.total_s == last.best_s && (c.flags.empty() ? "as given" : c.flags) == last.best_flags;
  EXPECT_TRUE(best_timed) << last.best_flags;
}

TEST(PlanSearch, WithRanksTheLargestRankIsPlannedAndShardingIsACandidate) {
  const train::TrainArgs given = args({});
  plan::SearchOptions o = options(int64_t(64) << 30);
  const plan::PlanSearch s = plan::search_plans(given.on(2), o);
  EXPECT_TRUE(s.given.exact);
  EXPECT_EQ(s.given.device_peak, plan::dry_run_largest_rank(given.on(2)).device.peak_allocated);
  bool sharded = false, overlapped = false;
  for (const plan::PlanCandidate& c : s.candidates) {
    sharded |= c.args.parallel.sharding == parallel::ShardingStrategy::optim_grads_params;
    overlapped |= c.args.parallel.overlap_grad_reduce;
    if (c.args.parallel.overlap_grad_reduce) {
      EXPECT_FALSE(c.exact) << c.flags;  // the estimator's peak: a dry run refuses --overlap-grad-reduce
    }
  }
  EXPECT_TRUE(sharded && overlapped);
  ASSERT_GE(s.chosen, 0);
  // Half the global batch per rank: each rank runs 1 of the 2 micro-batches.
  const std::string why = s.candidates[size_t(s.chosen)].why;
  EXPECT_EQ(why.find("micro-batches a step"), std::string::npos) << why;
}

TEST(PlanSearch, AHostBudgetKeepsTheChoiceWithinItAndTheDiskTierIsSearched) {
  const train::TrainArgs given = args({});
  const int64_t need = plan::dry_run(given).device.peak_allocated;
  plan::SearchOptions o = options(need / 2);  // offload or the swap optimizer is needed
  o.host_budget = 2 << 20;                    // 2 MiB of host memory: too little to offload much there
  const plan::PlanSearch host_only = plan::search_plans(given, o);
  o.disk_dir = ::testing::TempDir();
  const plan::PlanSearch disk = plan::search_plans(given, o);
  bool disk_timed = false;
  for (const plan::PlanCandidate& c : disk.candidates) {
    disk_timed |= c.args.memory.offload.target == memory::OffloadTarget::disk;
    if (c.fits && c.exact) {
      EXPECT_LE(c.host_peak, o.host_budget) << c.flags;
    }
  }
  EXPECT_TRUE(disk_timed);
  for (const plan::PlanSearch* s : {&host_only, &disk}) {
    if (s->chosen < 0) {
      EXPECT_NE(s->nothing_fits.find("fit the device but not the host budget, 2.00 MiB"), std::string::npos)
          << s->nothing_fits;
      continue;
    }
    const plan::PlanCandidate& c = s->candidates[size_t(s->chosen)];
    EXPECT_TRUE(c.exact) << c.flags;
    EXPECT_LE(c.host_peak, o.host_budget) << c.flags;
    EXPECT_EQ(c.host_peak, plan::dry_run(c.args).host.peak_allocated) << c.flags;
  }
  EXPECT_EQ(plan::plan_search_json(disk, o)["host_budget_bytes"], 2 << 20);
}

TEST(PlanSearch, WhenNothingFitsItSaysWhatDominates) {
  const train::TrainArgs given = args({});
  const plan::SearchOptions o = options(4 << 20);  // 4 MiB: below the parameters and AdamW's states
  const plan::PlanSearch s = plan::search_plans(given, o);
  EXPECT_EQ(s.chosen, -1);
  EXPECT_NE(s.nothing_fits.find("Parameters, gradients and optimizer states alone take"), std::string::npos)
      << s.nothing_fits;
  EXPECT_NE(s.nothing_fits.find("shard them over >= "), std::string::npos) << s.nothing_fits;
  EXPECT_TRUE(plan::plan_search_json(s, o)["chosen"].is_null());
}

// Past sharding, the triage order's second step: expert parallelism for a MoE model's states, context
// parallelism for activations; and a smallest candidate the dry runs measured is said with their peak.
TEST(PlanSearch, WhenNothingFitsItNamesExpertAndContextParallelism) {
  const plan::PlanSearch moe = plan::search_plans(
      train::parse_train_args({"--model", "tiny-qwen3-moe", "--mock-data", "--seq-length", "64", "--micro-batch-size",
                               "1", "--global-batch-size", "8", "--train-iters", "2"}),
      options(200 << 10));
  EXPECT_EQ(moe.chosen, -1);
  EXPECT_NE(moe.nothing_fits.find("--expert-model-parallel-size E holds 8 / E experts of each MoE layer a rank"),
            std::string::npos)
      << moe.nothing_fits;
  const train::TrainArgs long_seq =
      train::parse_train_args({"--model", "small-gpt2", "--mock-data", "--seq-length", "1024", "--micro-batch-size",
                               "4", "--global-batch-size", "8", "--train-iters", "2"});
  const plan::PlanSearch dense = plan::search_plans(long_seq, options(54 << 20));
  EXPECT_EQ(dense.chosen, -1);
  EXPECT_NE(dense.nothing_fits.find("Its activations take"), std::string::npos) << dense.nothing_fits;
  EXPECT_NE(dense.nothing_fits.find("or context parallelism over more ranks (--context-parallel-size C"),
            std::string::npos)
      << dense.nothing_fits;
  // 75 MiB: the estimator puts the smallest within the target, its dry run above it.
  const plan::PlanSearch measured = plan::search_plans(long_seq, options(75 << 20));
  EXPECT_EQ(measured.chosen, -1);
  EXPECT_TRUE(measured.smallest.checked);
  EXPECT_GT(measured.smallest.device_peak, measured.target);
  EXPECT_NE(measured.nothing_fits.find(format_bytes(measured.smallest.device_peak) + " (its dry run)"),
            std::string::npos)
      << measured.nothing_fits;
}

// A global batch that cannot be split over the planned ranks is the answer, before any search.
TEST(PlanSearch, AGlobalBatchThatDoesNotDivideOverTheRanksIsSaid) {
  plan::SearchOptions o = options(int64_t(1) << 30);
  try {
    plan::search_plans(args({}).on(4), o);  // global batch 8 = micro-batch 4 x 2: not over 4 ranks
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tidal plan: --global-batch-size 8 is not a multiple of --micro-batch-size 4 "
                                         "x 4 data-parallel ranks, so no candidate could run"),
              std::string::npos)
        << e.what();
  }
}

// When the dry runs refuse every candidate the answer says so, with their reason, instead of a
// memory figure (here: two context-parallel ranks planned on one).
TEST(PlanSearch, DryRunsThatRefuseTheRunAreTheAnswerNotMemory) {
  const plan::PlanSearch s = plan::search_plans(args({"--context-parallel-size", "2"}), options(int64_t(1) << 30));
  EXPECT_EQ(s.chosen, -1);
  EXPECT_EQ(s.nothing_fits.find("Nothing could be timed: the smallest candidate ("), 0u) << s.nothing_fits;
  EXPECT_NE(s.nothing_fits.find("but the dry runs refuse the configuration: "), std::string::npos) << s.nothing_fits;
  EXPECT_NE(s.nothing_fits.find("--context-parallel-size 2"), std::string::npos) << s.nothing_fits;
}

}  // namespace
}  // namespace tidal::train
