// Dry runs on worker processes (tidal/plan/dry_run_pool.h) and a search that runs them on several
// workers: the same results, in order, and every way a worker can fail said.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <stdexcept>

#include "tests/integration/plan_args.h"
#include "tidal/base/error.h"
#include "tidal/plan/device_profile.h"
#include "tidal/plan/dry_run.h"
#include "tidal/plan/dry_run_pool.h"
#include "tidal/plan/kernel_records.h"
#include "tidal/plan/search.h"
#include "tidal/train/arguments.h"

namespace tidal::plan {
namespace {

train::TrainArgs args(std::vector<std::string> extra) { return test::small_gpt2_plan_args(std::move(extra)); }

TEST(DryRunPool, AResultCrossesFromItsProcessIntact) {
  DryRunOutcome o;
  o.run = dry_run(args({"--use-distributed-optimizer"}).on(2), 1);
  o.run->saved = {};
  o.error = "kept";
  ASSERT_GT(o.run->kernels.size(), 100u);
  o.run->kernels[0].module = "model.layers.0.mlp";
  const DryRunOutcome back = decode_outcome(encode_outcome(o));
  ASSERT_TRUE(back.run.has_value());
  const DryRun &a = *o.run, &b = *back.run;
  EXPECT_EQ(back.error, "kept");
  EXPECT_EQ(b.device.peak_allocated, a.device.peak_allocated);
  EXPECT_EQ(b.host.peak_allocated, a.host.peak_allocated);
  for (size_t c = 0; c < a.device.category.size(); ++c) {
    EXPECT_EQ(b.device.category[c].peak, a.device.category[c].peak) << c;
    EXPECT_EQ(b.device.category[c].total_count, a.device.category[c].total_count) << c;
  }
  EXPECT_EQ(b.device.at_peak, a.device.at_peak);
  EXPECT_EQ(b.activation_bytes_per_layer, a.activation_bytes_per_layer);
  EXPECT_EQ(b.activation_bytes_outside_layers, a.activation_bytes_outside_layers);
  EXPECT_EQ(b.steps, a.steps);
  EXPECT_EQ(b.rank, 1);
  EXPECT_EQ(b.ranks, 2);
  EXPECT_EQ(b.sharding, a.sharding);
  EXPECT_EQ(b.parameter_numels, a.parameter_numels);
  EXPECT_EQ(b.expert_parameter, a.expert_parameter);
  EXPECT_EQ(b.recorded_kernels, int64_t(a.kernels.size()));
  ASSERT_EQ(b.kernels.size(), a.kernels.size());
  for (size_t i = 0; i < a.kernels.size(); ++i) {
    EXPECT_EQ(b.kernels[i].cost.kernel, a.kernels[i].cost.kernel) << i;  // the same static string
    EXPECT_EQ(b.kernels[i].cost.flops, a.kernels[i].cost.flops) << i;
    EXPECT_EQ(b.kernels[i].cost.bytes, a.kernels[i].cost.bytes) << i;
    EXPECT_EQ(b.kernels[i].phase, a.kernels[i].phase) << i;
    EXPECT_EQ(b.kernels[i].layer, a.kernels[i].layer) << i;
    EXPECT_EQ(b.kernels[i].module, a.kernels[i].module) << i;
    EXPECT_EQ(b.kernels[i].op, a.kernels[i].op) << i;
  }
  const DryRunOutcome refused = decode_outcome(encode_outcome(DryRunOutcome{std::nullopt, "no"}));
  EXPECT_FALSE(refused.run.has_value());
  EXPECT_EQ(refused.error, "no");
  // Cut short or with bytes left over: an error, never a half-read result.
  const std::string bytes = encode_outcome(o);
  EXPECT_THROW(decode_outcome(bytes.substr(0, bytes.size() - 3)), Error);
  EXPECT_THROW(decode_outcome(bytes + "x"), Error);
}

TEST(DryRunPool, WorkersRunJobsByIndexOneAfterAnotherInTheirOwnProcesses) {
  DryRunWorkers workers(2, [](size_t i) {
    DryRunOutcome o;
    o.run = DryRun{};
    o.run->rank = int(i);
    o.run->steps = ::getpid();
    o.error = std::string(100000 * i, 'e');  // more than a pipe holds
    return o;
  });
  std::set<int64_t> pids;
  for (int round = 0; round < 2; ++round) {
    std::vector<size_t> done;
    const std::vector<DryRunOutcome> out = workers.run({5, 1, 4, 0, 3}, [&done](size_t k) { done.push_back(k); });
    ASSERT_EQ(out.size(), 5u);
    const std::vector<int> index = {5, 1, 4, 0, 3};
    for (size_t k = 0; k < out.size(); ++k) {
      ASSERT_TRUE(out[k].run.has_value());
      EXPECT_EQ(out[k].run->rank, index[k]);
      EXPECT_EQ(out[k].error.size(), size_t(100000 * index[k]));
      EXPECT_NE(out[k].run->steps, int64_t(::getpid()));
      pids.insert(out[k].run->steps);
    }
    EXPECT_EQ(std::set<size_t>(done.begin(), done.end()).size(), 5u);
  }
  EXPECT_EQ(pids.size(), 2u);  // the same two processes in both rounds
}

TEST(DryRunPool, AWorkerThatDiesOrThrowsIsAnErrorNamingIt) {
  const auto job = [](size_t i) -> DryRunOutcome {
    if (i == 7) std::abort();
    if (i == 8) throw std::runtime_error("out of shapes");
    return DryRunOutcome{DryRun{}, ""};
  };
  try {
    DryRunWorkers(2, job).run({0, 7, 1});
    FAIL() << "a worker killed by a signal was not said";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the process of dry run 2 ended"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("TIDAL_PLAN_JOBS=1"), std::string::npos) << e.what();
  }
  try {
    DryRunWorkers(2, job).run({8, 0});
    FAIL() << "an exception in a worker was not said";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dry run 1 failed: out of shapes"), std::string::npos) << e.what();
  }
}

TEST(DryRunPool, TheWorkersAreTheCoresOrTIDAL_PLAN_JOBS) {
  const char* was = std::getenv("TIDAL_PLAN_JOBS");
  const std::string saved = was != nullptr ? was : "";
  ::unsetenv("TIDAL_PLAN_JOBS");
  EXPECT_GE(dry_run_workers(), 1);
  ::setenv("TIDAL_PLAN_JOBS", "3", 1);
  EXPECT_EQ(dry_run_workers(), 3);
  for (const char* bad : {"0", "-2", "two", "3x"}) {
    ::setenv("TIDAL_PLAN_JOBS", bad, 1);
    try {
      dry_run_workers();
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("TIDAL_PLAN_JOBS must be a number of processes"), std::string::npos);
    }
  }
  if (was != nullptr) {
    ::setenv("TIDAL_PLAN_JOBS", saved.c_str(), 1);
  } else {
    ::unsetenv("TIDAL_PLAN_JOBS");
  }
}

// The whole search on 1 and on 3 workers: every candidate, its time and peaks, the choice and the dry
// runs used alike — also where the kernels' budget stops the optional rungs midway (the dry runs run
// ahead past it are not counted).
TEST(DryRunPool, ASearchOnSeveralWorkersIsTheSearchOnOne) {
  for (const int64_t kernel_budget : {int64_t(1000000), int64_t(20000)}) {
    const train::TrainArgs given = args({}).on(2);
    SearchOptions o;
    o.budget = dry_run(given).device.peak_allocated * 3 / 4;
    o.profile = load_device_profile("a100");
    o.dry_run_kernels = kernel_budget;
    const PlanSearch one = search_plans(given, o);
    o.dry_run_workers = 3;
    const PlanSearch three = search_plans(given, o);
    EXPECT_EQ(one.dry_runs, three.dry_runs) << kernel_budget;
    EXPECT_EQ(one.chosen, three.chosen) << kernel_budget;
    EXPECT_EQ(one.nothing_fits, three.nothing_fits);
    EXPECT_EQ(one.given.device_peak, three.given.device_peak);
    ASSERT_EQ(one.candidates.size(), three.candidates.size()) << kernel_budget;
    for (size_t i = 0; i < one.candidates.size(); ++i) {
      const PlanCandidate &a = one.candidates[i], &b = three.candidates[i];
      EXPECT_EQ(a.flags, b.flags) << i;
      EXPECT_EQ(a.time.total_s, b.time.total_s) << a.flags;
      EXPECT_EQ(a.device_peak, b.device_peak) << a.flags;
      EXPECT_EQ(a.host_peak, b.host_peak) << a.flags;
      EXPECT_EQ(a.exact, b.exact) << a.flags;
      EXPECT_EQ(a.checked, b.checked) << a.flags;
      EXPECT_EQ(a.fits, b.fits) << a.flags;
      EXPECT_EQ(a.pareto, b.pareto) << a.flags;
    }
    if (kernel_budget < 1000000) {
      EXPECT_LT(one.candidates.size(), size_t(one.enumerated) / 2);
    }
  }
}

}  // namespace
}  // namespace tidal::plan
