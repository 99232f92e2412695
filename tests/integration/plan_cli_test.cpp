// `tidal plan`: its plan, applied to `tidal train` under the same emulated device limit, trains where
// the configuration as given runs out of memory; exit codes and bad flags.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/integration/run_command.h"
#include "tidal/io/atomic_file.h"
#include "tidal/memory_stats.h"
#include "tidal/seam/registry.h"

namespace {

using Result = tidal::testing::CommandResult;

const std::string kTidal = "OMP_WAIT_POLICY=passive " TIDAL_BINARY_DIR "/tidal";
// tiny-gpt2, 4 x 64 tokens: a step needs about 4.9 MiB.
const std::string kTiny =
    " --model tiny-gpt2 --mock-data --seq-length 64 --micro-batch-size 4 --no-progress "
    "--eval-interval 0 --sample-tokens 0";

Result run(const std::string& cmd) { return tidal::testing::run_command(cmd); }

TEST(PlanCli, ThePlanTrainsWhereTheConfigurationAsGivenRunsOutOfMemory) {
  const Result plan = run(kTidal + " plan" + kTiny + " --memory 3.5MiB");
  ASSERT_EQ(plan.code, 0) << plan.output;
  EXPECT_NE(plan.output.find("needs about 4.86 MiB"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("It does not fit the budget, 3.50 MiB"), std::string::npos) << plan.output;
  const size_t add = plan.output.find("Add: ");
  ASSERT_NE(add, std::string::npos) << plan.output;
  const std::string flags = plan.output.substr(add + 5, plan.output.find('\n', add) - add - 5);

  const Result plain = run("TIDAL_DEVICE_MEMORY=3.5MiB " + kTidal + " train" + kTiny + " --train-iters 3");
  EXPECT_EQ(plain.code, 3) << plain.output;  // out of memory
  const Result planned = run("TIDAL_DEVICE_MEMORY=3.5MiB " + kTidal + " train" + kTiny + " --train-iters 3 " + flags);
  EXPECT_EQ(planned.code, 0) << flags << "\n" << planned.output;
  // TIDAL_DEVICE_MEMORY is the default budget.
  const Result env = run("TIDAL_DEVICE_MEMORY=3.5MiB " + kTidal + " plan" + kTiny);
  EXPECT_EQ(env.output, plan.output);
}

// --bf16 (tiny-gpt2, 4 x 64 tokens: 3.58 MiB): tidal plan and the out-of-memory advice of tidal train
// --bf16 predict the same bf16 step, and the plan trains under the budget where the step as given
// runs out of memory.
TEST(PlanCli, Bf16PlanAndAdviceAgreeAndThePlanTrains) {
  const Result plan = run(kTidal + " plan" + kTiny + " --bf16 --memory 3MiB");
  ASSERT_EQ(plan.code, 0) << plan.output;
  const std::string needs =
      "needs about 3.58 MiB (parameters 291.50 KiB, optimizer states 1.71 MiB, activations 1.09 MiB, logits 512.00 "
      "KiB)";
  EXPECT_NE(plan.output.find(needs), std::string::npos) << plan.output;
  const size_t add = plan.output.find("Add: ");
  ASSERT_NE(add, std::string::npos) << plan.output;
  const std::string flags = plan.output.substr(add + 5, plan.output.find('\n', add) - add - 5);
  const std::string train = "TIDAL_DEVICE_MEMORY=3MiB " + kTidal + " train" + kTiny + " --bf16 --train-iters 3";
  const Result plain = run(train);
  EXPECT_EQ(plain.code, 3) << plain.output;  // out of memory, with the same prediction
  EXPECT_NE(plain.output.find("needs about 3.58 MiB (parameters 291.50 KiB, AdamW states 1.71 MiB"), std::string::npos)
      << plain.output;
  EXPECT_NE(plain.output.find("already on: fused (flash) attention, bf16 mixed precision"), std::string::npos)
      << plain.output;
  const Result planned = run(train + " " + flags);
  EXPECT_EQ(planned.code, 0) << flags << "\n" << planned.output;
  // The f32 step of the same model: 4-byte parameters, 8 bytes of AdamW state per parameter.
  const Result f32 = run(kTidal + " plan" + kTiny);
  EXPECT_NE(f32.output.find("parameters 583.00 KiB, AdamW states 1.14 MiB"), std::string::npos) << f32.output;
}

// Published config.json files as transformers 5 saves them (tests/fixtures/hf/published/v5/) plan at their
// published size: 8 x H100, bf16, 4096 tokens (a dense model, one with a sliding window, one with q/k/v
// biases; about 5 s each). qwen3-30b-a3b plans too, in about 6 minutes (its expert-parallel candidates:
// issue 32's planner speed), so it is left out here.
TEST(PlanCli, PublishedConfigsPlanAtTheirSize) {
  for (const char* name : {"llama-3.1-8b", "mistral-7b-v0.1", "qwen2.5-7b-instruct"}) {
    const Result r = run(kTidal + " plan --config " TIDAL_SOURCE_DIR "/tests/fixtures/hf/published/v5/" + name +
                         ".json --mock-data --seq-length 4096 --micro-batch-size 1 --global-batch-size 8 --bf16 "
                         "--device h100 --data-parallel-size 8");
    EXPECT_EQ(r.code, 0) << name << "\n" << r.output;
    EXPECT_NE(r.output.find("Chosen, the fastest that fits: "), std::string::npos) << name << "\n" << r.output;
  }
}

TEST(PlanCli, FitsAsGivenNothingFitsNoBudgetAndBadFlags) {
  const Result fits = run(kTidal + " plan" + kTiny + " --memory 1GiB");
  EXPECT_EQ(fits.code, 0) << fits.output;
  EXPECT_NE(fits.output.find("It fits the budget, 1.00 GiB, less 102.40 MiB of headroom"), std::string::npos)
      << fits.output;
  const Result none = run(kTidal + " plan" + kTiny + " --memory 1MiB");
  EXPECT_EQ(none.code, 3) << none.output;
  EXPECT_NE(none.output.find("Even with all of them"), std::string::npos) << none.output;
  const Result advice = run(kTidal + " plan" + kTiny);  // no budget: what each step would save
  EXPECT_EQ(advice.code, 0) << advice.output;
  EXPECT_NE(advice.output.find("What to try, in the triage order"), std::string::npos) << advice.output;
  EXPECT_NE(advice.output.find("give a budget"), std::string::npos) << advice.output;
  // --json is the search's document: without a budget there is none, and the error says so (not text on stdout).
  const Result json = run(kTidal + " plan" + kTiny + " --json");
  EXPECT_EQ(json.code, 1) << json.output;
  EXPECT_NE(json.output.find("--json prints the search for a memory budget"), std::string::npos) << json.output;
  const Result headroom = run(kTidal + " plan" + kTiny + " --memory 4MiB --headroom 0");
  EXPECT_NE(headroom.output.find("less 0 B of headroom: 4.00 MiB"), std::string::npos) << headroom.output;
  for (const char* bad : {" --memory lots", " --memory 1GiB --headroom 100", " --memory", " --num-layer 3"}) {
    const Result r = run(kTidal + " plan" + kTiny + bad);
    EXPECT_EQ(r.code, 1) << bad << "\n" << r.output;
    EXPECT_NE(r.output.find("error"), std::string::npos) << bad << "\n" << r.output;
  }
}

// --dry-run prints the device peak a real run of the same flags reports in --metrics-json, to the byte.
TEST(PlanCli, DryRunPrintsTheRealRunsPeak) {
  const std::string flags = kTiny + " --train-iters 2 --lr-warmup-iters 0 --recompute-granularity selective";
  const std::string metrics = ::testing::TempDir() + "tidal_plan_dry_run_metrics.json";
  const Result train = run(kTidal + " train" + flags + " --metrics-json " + metrics);
  ASSERT_EQ(train.code, 0) << train.output;
  const int64_t peak = nlohmann::json::parse(tidal::io::read_file(metrics))["summary"]["device_peak_bytes"];
  const Result plan = run(kTidal + " plan --dry-run" + flags);
  ASSERT_EQ(plan.code, 0) << plan.output;
  EXPECT_NE(plan.output.find("Dry run (2 steps on the meta device, counted by the allocator): device peak 4.86 MiB (" +
                             std::to_string(peak) + " B;"),
            std::string::npos)
      << plan.output;
  EXPECT_NE(plan.output.find("dry run / estimator 1.000"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("  Host peak 0 B (0 B; reserved 0 B).\n"), std::string::npos) << plan.output;
  const Result refused = run(kTidal + " plan --dry-run" + flags + " --use-distributed-optimizer --overlap-grad-reduce");
  EXPECT_EQ(refused.code, 1) << refused.output;
  EXPECT_NE(refused.output.find("tidal plan --dry-run: --overlap-grad-reduce is not dry-run"), std::string::npos)
      << refused.output;
}

// --kernels cuda sizes the workspaces as the CUDA backend does (bf16 attention: cuDNN's, smaller than the
// CPU tiles here); a build without CUDA refuses it by name; anything else is refused with the choices.
TEST(PlanCli, DryRunKernelsFlag) {
  const std::string flags = kTiny + " --train-iters 2 --lr-warmup-iters 0 --bf16";
  const Result cpu = run(kTidal + " plan --dry-run" + flags),
               cpu2 = run(kTidal + " plan --dry-run --kernels cpu" + flags);
  ASSERT_EQ(cpu.code, 0) << cpu.output;
  EXPECT_EQ(cpu.output, cpu2.output);
  const Result cuda = run(kTidal + " plan --dry-run --kernels cuda" + flags);
  if (tidal::registered_device_types().back() == tidal::DeviceType::cuda) {
    ASSERT_EQ(cuda.code, 0) << cuda.output;
    EXPECT_NE(cuda.output, cpu.output);
  } else {
    EXPECT_EQ(cuda.code, 1) << cuda.output;
    EXPECT_NE(cuda.output.find("cannot plan for cuda: this tidal was built without its backend"), std::string::npos)
        << cuda.output;
  }
  const Result bad = run(kTidal + " plan --dry-run --kernels gpu" + flags);
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_NE(bad.output.find("--kernels takes cpu or cuda, got 'gpu'"), std::string::npos) << bad.output;
}

// The saved-tensor table from the dry run (--report-memory) is the one the real run prints, line for
// line: the same code saved the same tensors, on the meta device.
std::string saved_table(const std::string& output) {
  const size_t from = output.find("layer  module");
  const size_t all = output.find("  all:", from);
  if (from == std::string::npos || all == std::string::npos) return "";
  return output.substr(from, output.find('\n', all) - from);
}

TEST(PlanCli, DryRunPrintsTheRealRunsSavedTensorTable) {
  const std::string flags = kTiny + " --train-iters 2 --lr-warmup-iters 0 --recompute-activation-function";
  const Result train = run(kTidal + " train" + flags + " --report-memory");
  ASSERT_EQ(train.code, 0) << train.output;
  const Result plan = run(kTidal + " plan --dry-run --report-memory" + flags);
  ASSERT_EQ(plan.code, 0) << plan.output;
  ASSERT_NE(saved_table(train.output), "") << train.output;
  EXPECT_EQ(saved_table(plan.output), saved_table(train.output)) << plan.output;
  const Result hint = run(kTidal + " plan --dry-run" + flags);
  ASSERT_EQ(hint.code, 0) << hint.output;
  EXPECT_EQ(saved_table(hint.output), "") << hint.output;
  EXPECT_NE(hint.output.find("  (--report-memory: the table of the "), std::string::npos) << hint.output;
}

// With offload and the swap optimizer the dry run prints the host peak a real run reports in
// --metrics-json, to the byte, and its device peak too.
TEST(PlanCli, DryRunPrintsTheRealRunsHostPeak) {
  const std::string flags = kTiny +
                            " --train-iters 2 --lr-warmup-iters 0 --activation-offload --offload-policy layer-input "
                            "--swap-optimizer --swap-optimizer-times 2";
  const std::string metrics = ::testing::TempDir() + "tidal_plan_dry_run_host_metrics.json";
  const Result train = run(kTidal + " train" + flags + " --metrics-json " + metrics);
  ASSERT_EQ(train.code, 0) << train.output;
  const nlohmann::json summary = nlohmann::json::parse(tidal::io::read_file(metrics))["summary"];
  const int64_t device = summary["device_peak_bytes"], host = summary["host_peak_bytes"];
  ASSERT_GT(host, 0);
  const Result plan = run(kTidal + " plan --dry-run" + flags);
  ASSERT_EQ(plan.code, 0) << plan.output;
  EXPECT_NE(plan.output.find(" (" + std::to_string(device) + " B; reserved"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("  Host peak " + tidal::format_bytes(host) + " (" + std::to_string(host) + " B;"),
            std::string::npos)
      << plan.output;
  EXPECT_NE(plan.output.find("  host_offload     "), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("  (host)\n"), std::string::npos) << plan.output;
}

// --data-parallel-size N with sharding: the dry run plays the ranks in one process and names the one
// with the highest peak (tiny-gpt2 over 3 ranks: rank 0's shard is the largest).
TEST(PlanCli, DryRunOfShardedRanksNamesTheLargest) {
  const std::string flags = kTiny + " --train-iters 2 --global-batch-size 12 --use-distributed-optimizer";
  const Result plan = run(kTidal + " plan --dry-run --data-parallel-size 3" + flags);
  ASSERT_EQ(plan.code, 0) << plan.output;
  EXPECT_NE(plan.output.find("  Rank 0 of 3 has the highest device peak (ranks dry-run: 0, 1, 2).\n"),
            std::string::npos)
      << plan.output;
  const Result one = run(kTidal + " plan --dry-run" + flags);
  EXPECT_EQ(one.output.find("has the highest device peak"), std::string::npos) << one.output;
  // Without --global-batch-size, Megatron's default for the ranks: micro-batch 4 x 3 ranks.
  const Result dflt = run(kTidal + " plan --dry-run --data-parallel-size 3" + kTiny + " --train-iters 2");
  ASSERT_EQ(dflt.code, 0) << dflt.output;
}

// Context parallelism is planned per rank (seq / C tokens of activations and logits), on ranks it divides.
TEST(PlanCli, ContextParallelIsPlannedPerRank) {
  const std::string flags = kTiny + " --global-batch-size 8 --memory 1GiB --data-parallel-size 2";
  const Result whole = run(kTidal + " plan" + flags);
  const Result halves = run(kTidal + " plan" + flags + " --context-parallel-size 2 --dry-run");
  ASSERT_EQ(halves.code, 0) << halves.output;
  ASSERT_EQ(whole.code, 0) << whole.output;
  EXPECT_NE(halves.output.find("Dry run (2 steps"), std::string::npos) << halves.output;
  auto needs = [](const std::string& out) {
    const size_t at = out.find("needs about ");
    return at == std::string::npos ? std::string() : out.substr(at, out.find(' ', at + 12) - at);
  };
  EXPECT_NE(needs(halves.output), "") << halves.output;
  EXPECT_NE(needs(halves.output), needs(whole.output)) << halves.output;
  const Result one = run(kTidal + " plan" + kTiny + " --context-parallel-size 2 --memory 1GiB");
  EXPECT_EQ(one.code, 1) << one.output;
  EXPECT_NE(one.output.find("--context-parallel-size 2 does not divide the 1 ranks planned for"), std::string::npos)
      << one.output;
}

}  // namespace

namespace {

// DeepSeek-V4 (its mHC streams and compressed attention, memory/estimator_deepseek_v4.h): --dry-run measures its step
// and sets the estimator's prediction beside it, says whether that fits a budget (exit 3 when not); without
// --dry-run, the triage names its own recompute flags and the search plans it for a budget.
TEST(PlanCli, DeepSeekV4IsDryRunTriagedAndPlanned) {
  const std::string v4 = " --config " TIDAL_SOURCE_DIR
                         "/tests/fixtures/hf/tiny_deepseek_v4_csa/config.json --mock-data --seq-length 32 "
                         "--micro-batch-size 2 --global-batch-size 2";
  const Result fits = run(kTidal + " plan" + v4 + " --dry-run --memory 1GiB");
  ASSERT_EQ(fits.code, 0) << fits.output;
  EXPECT_NE(fits.output.find(", the estimator predicts "), std::string::npos) << fits.output;
  EXPECT_NE(fits.output.find("It fits the budget, 1.00 GiB, less 102.40 MiB of headroom: 921.60 MiB."),
            std::string::npos)
      << fits.output;
  const Result tight = run(kTidal + " plan" + v4 + " --dry-run --memory 100KiB");
  EXPECT_EQ(tight.code, 3) << tight.output;
  const Result triage = run(kTidal + " plan" + v4);
  ASSERT_EQ(triage.code, 0) << triage.output;
  for (const char* flag : {"--recompute-csa-attention would save", "--mhc-recompute would save"})
    EXPECT_NE(triage.output.find(flag), std::string::npos) << triage.output;
  const Result plan = run(kTidal + " plan" + v4 + " --device h100 --memory 1MiB");
  ASSERT_EQ(plan.code, 0) << plan.output;
  EXPECT_NE(plan.output.find("Chosen, the fastest that fits: "), std::string::npos) << plan.output;
}

}  // namespace
