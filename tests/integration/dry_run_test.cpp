// tidal::plan::dry_run (plan/dry_run.h): the meta-device dry run of a configuration allocates, byte
// for byte, what the real run of it allocates on the device, and touches no memory for a large model.
#include "tidal/plan/dry_run.h"

#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "tests/integration/train_helpers.h"
#include "tests/support/peaks_since.h"
#include "tidal/allocator.h"
#include "tidal/memory/estimator.h"
#include "tidal/models/causal_lm.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/optim/shard_layout.h"
#include "tidal/plan/oom_advice.h"
#include "tidal/plan/step_peak.h"

namespace tidal::train {
namespace {

const std::string kDeepseekV4 = TIDAL_SOURCE_DIR "/tests/fixtures/hf/tiny_deepseek_v4_csa/config.json";

// Micro-batches of 2 x 32 tokens, one per step unless `more` gives --global-batch-size.
// A preset's name, or a config.json.
std::vector<std::string> tiny(const std::string& model, const std::vector<std::string>& more) {
  std::vector<std::string> flags = with({model.ends_with(".json") ? "--config" : "--model", model, "--mock-data",
                                         "--seq-length", "32", "--micro-batch-size", "2", "--train-iters", "2",
                                         "--lr-warmup-iters", "0", "--eval-interval", "0", "--log-interval", "100"},
                                        more);
  if (std::find(more.begin(), more.end(), "--global-batch-size") == more.end())
    flags = with(flags, {"--global-batch-size", "2"});
  return flags;
}

// Every recompute mode, chunked loss, accumulation, bf16, eager attention, dropout, packed documents.
const std::vector<std::vector<std::string>> kFeatures = {
    {},
    {"--recompute-granularity", "selective"},
    {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"},
    {"--recompute-activation-function", "--recompute-norm"},
    {"--loss-compute-mode", "chunk", "--loss-chunk-size", "16"},
    {"--global-batch-size", "4"},
    {"--bf16"},
    {"--bf16", "--recompute-granularity", "selective", "--loss-compute-mode", "chunk", "--loss-chunk-size", "16"},
    {"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "1"},
    {"--attention", "eager"},
    {"--hidden-dropout", "0.1", "--attention-dropout", "0.1"},
    {"--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss"},
};

struct Measured {
  MemoryStats device, host;
};

// The device and host allocators' peaks over a real run of `flags`.
Measured measured(const std::vector<std::string>& flags) {
  Allocator& cpu = device_allocator(Device::cpu());
  const MemoryStats device = cpu.stats(), host = host_allocator().stats();
  train(flags);
  return {testing::peaks_since(device, cpu.stats()), testing::peaks_since(host, host_allocator().stats())};
}

void expect_same_peaks(const std::vector<std::string>& flags) {
  SCOPED_TRACE(joined(flags));
  const plan::DryRun dry = plan::dry_run(train::parse_train_args(flags));
  const Measured real = measured(flags);
  EXPECT_EQ(dry.steps, 2);
  testing::expect_same_peaks(dry.device, real.device, "device");
  testing::expect_same_peaks(dry.host, real.host, "host");
  EXPECT_GT(dry.device.peak_allocated, 0);
  EXPECT_EQ(device_allocator(Device::meta()).stats().allocated, 0);  // everything freed
  EXPECT_EQ(host_allocator(Device::meta()).stats().allocated, 0);
}

// The dry run of `a` (parsed from `flags`), whose parameters, gradients and AdamW states peak as a real run's do (an
// MoE model's activations do not: a real run routes its tokens unevenly, the dry run evenly, models/moe.cpp).
plan::DryRun dry_run_with_real_states(const train::TrainArgs& a, const std::vector<std::string>& flags) {
  plan::DryRun dry = plan::dry_run(a);
  const MemoryStats real = measured(flags).device;
  for (MemoryCategory c : {MemoryCategory::parameter, MemoryCategory::gradient, MemoryCategory::optimizer_state})
    EXPECT_EQ(dry.device[c].peak, real[c].peak) << category_name(c);
  return dry;
}

TEST(DryRun, PeaksEqualTheRealRunsForGpt2) {
  for (const auto& f : kFeatures) expect_same_peaks(tiny("tiny-gpt2", f));
}

TEST(DryRun, PeaksEqualTheRealRunsForLlama) {
  for (const auto& f : kFeatures) expect_same_peaks(tiny("tiny-llama", f));
}

TEST(DryRun, PeaksEqualTheRealRunsForQwen3) {
  for (const auto& f : kFeatures) expect_same_peaks(tiny("tiny-qwen3", f));
}

// A real MoE run routes its tokens unevenly, the dry run evenly (models/moe.cpp): the parameters,
// gradients and AdamW states equal the real run's, and the activations the estimator's, which
// assumes the same even split.
TEST(DryRun, MoeMatchesTheRealRunsStatesAndTheEstimatorsActivations) {
  for (const auto& f : kFeatures) {
    const std::vector<std::string> flags = tiny("tiny-qwen3-moe", f);
    SCOPED_TRACE(joined(flags));
    const train::TrainArgs a = train::parse_train_args(flags);
    const plan::DryRun dry = dry_run_with_real_states(a, flags);
    const plan::TriageSettings s = plan::triage_settings(a);
    const memory::ActivationEstimate e = memory::estimate_activations(
        a.model,
        memory::activation_inputs(a.memory, a.micro_batch_size, a.seq_length, s.attention, s.precision.param_dtype()));
    EXPECT_EQ(dry.activation_bytes_per_layer, e.layer_kept);
    // The embedding keeps its ids, a view of the (B, T + 1) batch: the whole batch's storage, B x 8
    // bytes more than the estimator's (B, T).
    EXPECT_EQ(dry.device[MemoryCategory::activation].peak, e.peak + a.micro_batch_size * 8);
    EXPECT_EQ(dry.activation_bytes_outside_layers, e.outside_layers + a.micro_batch_size * 8);
  }
}

// DeepSeek-V3 with multi-token prediction (--mtp-num-layers): the dry run holds the real run's parameters, gradients
// and AdamW states (the MTP depths' among them), and the estimator's prediction of the step (its depths' activations,
// their heads and losses) is within 5% of the dry run's peak in each mode — as close as it comes for this tiny
// DeepSeek-V3 without MTP (1.00 to 1.08 at 2 x 32 tokens: small tensors' temporaries; docs/training.md). Activation
// offload is left out: with MTP the prediction is 6.8% low there (not understood yet).
TEST(DryRun, MultiTokenPredictionStatesAndThePrediction) {
  const std::vector<std::vector<std::string>> modes = {
      {},
      {"--loss-compute-mode", "chunk", "--loss-chunk-size", "16"},
      {"--bf16"},
      {"--attention", "eager"},
      {"--swap-optimizer"},
      {"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "2"},
  };
  for (const auto& f : modes) {
    const std::vector<std::string> flags = tiny("tiny-deepseek-v3", with({"--mtp-num-layers", "2"}, f));
    SCOPED_TRACE(joined(flags));
    const train::TrainArgs a = train::parse_train_args(flags);
    const plan::DryRun dry = dry_run_with_real_states(a, flags);
    const int64_t predicted = plan::predict_step_peak(a.model, plan::triage_settings(a)).total;
    EXPECT_NEAR(double(predicted), double(dry.device.peak_allocated), 0.05 * double(dry.device.peak_allocated));
  }
}

// --activation-offload: every policy, prefetch depths, the host cap and the disk tier, alone and
// under recompute; the host side (offloaded copies, staging buffers) counted as the real host
// allocator counts it.
std::vector<std::vector<std::string>> offload_features(const std::string& dir) {
  const std::vector<std::vector<std::string>> offload = {
      {"--activation-offload"},
      {"--activation-offload", "--offload-policy", "layer-input"},
      {"--activation-offload", "--offload-policy", "core-attn", "--attention", "eager"},
      {"--activation-offload", "--offload-policy", "min-bytes=4096", "--offload-prefetch-depth", "0"},
      {"--activation-offload", "--offload-prefetch-depth", "2", "--global-batch-size", "4"},
      {"--activation-offload", "--offload-host-limit", "40KiB"},
      {"--activation-offload", "--offload-target", "disk", "--offload-dir", dir},
  };
  const std::vector<std::vector<std::string>> recompute = {
      {},
      {"--recompute-granularity", "selective"},
      {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"},
      {"--recompute-activation-function", "--bf16"},
  };
  std::vector<std::vector<std::string>> all;
  for (const auto& o : offload)
    for (const auto& r : recompute) {
      // core-attn has nothing to offload where selective or full recompute recomputes the core.
      const bool core_attn = o.size() > 2 && o[2] == "core-attn";
      if (!core_attn || r.empty() || r[0] == "--recompute-activation-function") all.push_back(with(o, r));
    }
  return all;
}

TEST(DryRun, OffloadPeaksEqualTheRealRunsOnDeviceAndHost) {
  const std::string dir = fresh_dir("dry_run_offload");
  const std::string spill = dir + "/spill";
  for (const auto& f : offload_features(spill)) {
    expect_same_peaks(tiny("tiny-llama", f));
    expect_same_peaks(tiny("tiny-gpt2", f));
  }
  const plan::DryRun host = plan::dry_run(train::parse_train_args(tiny("tiny-gpt2", {"--activation-offload"})));
  EXPECT_GT(host.host[MemoryCategory::host_offload].peak, 0);  // the copies of layer 0 (layer 1 keeps its own)
  // The real runs made the spill directory; a dry run makes nothing.
  const std::string none = dir + "/never";
  const plan::DryRun d = plan::dry_run(train::parse_train_args(
      tiny("tiny-gpt2", {"--activation-offload", "--offload-target", "disk", "--offload-dir", none})));
  EXPECT_FALSE(std::filesystem::exists(none));
  // The two 16 MiB staging buffers of the disk tier, in host memory.
  EXPECT_EQ(d.host[MemoryCategory::host_offload].peak, 2 * (int64_t(16) << 20));
}

// --swap-optimizer: AdamW's states in host memory, the device windows.
TEST(DryRun, SwapOptimizerPeaksEqualTheRealRunsOnDeviceAndHost) {
  for (const std::vector<std::string>& f : std::vector<std::vector<std::string>>{
           {"--swap-optimizer"},
           {"--swap-optimizer", "--swap-optimizer-times", "3"},
           {"--swap-optimizer", "--swap-optimizer-times", "1", "--bf16"},
           {"--swap-optimizer", "--bf16", "--recompute-granularity", "selective", "--global-batch-size", "4"},
           {"--swap-optimizer", "--activation-offload", "--offload-policy", "layer-input"},
       }) {
    expect_same_peaks(tiny("tiny-llama", f));
    expect_same_peaks(tiny("tiny-qwen3", f));
  }
  const plan::DryRun d = plan::dry_run(train::parse_train_args(tiny("tiny-gpt2", {"--swap-optimizer"})));
  EXPECT_GT(d.host[MemoryCategory::host_offload].peak, 0);
  EXPECT_EQ(d.host[MemoryCategory::host_offload].peak, d.host.peak_allocated);
}

TEST(DryRun, ActivationsPerLayerAreTheSavedTensors) {
  const plan::DryRun dry = plan::dry_run(train::parse_train_args(tiny("tiny-llama", {})));
  ASSERT_EQ(dry.activation_bytes_per_layer.size(), 2u);
  EXPECT_GT(dry.activation_bytes_per_layer[0], 0);
  EXPECT_EQ(dry.activation_bytes_per_layer[0], dry.activation_bytes_per_layer[1]);  // alike layers
  EXPECT_GT(dry.activation_bytes_outside_layers, 0);
}

int64_t max_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t(u.ru_maxrss) * 1024;
}

TEST(DryRun, ALargeModelTouchesNoMemory) {
  const int64_t before = max_rss_bytes();
  const plan::DryRun dry =
      plan::dry_run(train::parse_train_args({"--model", "gpt2-124m", "--mock-data", "--seq-length", "1024",
                                             "--micro-batch-size", "4", "--global-batch-size", "4"}));
  // 124M f32 parameters, their gradients and AdamW's two moments alone: 2 GB on the meta device.
  EXPECT_GT(dry.device.peak_allocated, int64_t(2e9));
  // Qwen3-8B at 4096 tokens: 134 GiB on the meta device.
  const plan::DryRun big =
      plan::dry_run(train::parse_train_args({"--model", "qwen3-8b", "--mock-data", "--seq-length", "4096",
                                             "--micro-batch-size", "1", "--global-batch-size", "1"}));
  EXPECT_GT(big.device.peak_allocated, int64_t(100) << 30);
  EXPECT_EQ(big.activation_bytes_per_layer.size(), 36u);
  // Its host side too: the swapped AdamW states (8 bytes per parameter) and the offloaded copies,
  // counted by the meta host allocator, touched nowhere.
  const plan::DryRun host = plan::dry_run(
      train::parse_train_args({"--model", "qwen3-8b", "--mock-data", "--seq-length", "4096", "--micro-batch-size", "1",
                               "--global-batch-size", "1", "--activation-offload", "--swap-optimizer"}));
  EXPECT_GT(host.host[MemoryCategory::host_offload].peak, int64_t(60) << 30);
  EXPECT_LT(host.device[MemoryCategory::optimizer_state].peak, big.device[MemoryCategory::optimizer_state].peak / 4);
  EXPECT_LT(max_rss_bytes() - before, int64_t(200) << 20);
}

// One process plays each rank of a sharded run: the ranks' shards differ, and dry_run_largest_rank
// takes the one with the highest device peak among every rank (up to kDryRunRanks ranks) or the
// kDryRunRanks ranks with the largest shards.
TEST(DryRun, TheLargestRankIsTheHighestOfTheRanksItRuns) {
  const train::TrainArgs a =
      train::parse_train_args(tiny("tiny-llama", {"--use-distributed-optimizer", "--global-batch-size", "6"}));
  int64_t highest = 0;
  int at = -1;
  std::vector<int64_t> states;
  for (int r = 0; r < 3; ++r) {
    const plan::DryRun d = plan::dry_run(a.on(3), r);
    EXPECT_EQ(d.rank, r);
    EXPECT_EQ(d.ranks, 3);
    states.push_back(d.device[MemoryCategory::optimizer_state].peak);
    if (d.device.peak_allocated > highest) highest = d.device.peak_allocated, at = r;
  }
  EXPECT_NE(states[0], states[2]);  // the shards differ
  const plan::DryRun largest = plan::dry_run_largest_rank(a.on(3));
  EXPECT_EQ(largest.device.peak_allocated, highest);
  EXPECT_EQ(largest.rank, at);
  EXPECT_EQ(largest.ranks_run, (std::vector<int>{0, 1, 2}));
  // More ranks than kDryRunRanks: the ranks with the largest shards.
  const train::TrainArgs six =
      train::parse_train_args(tiny("tiny-llama", {"--use-distributed-optimizer", "--global-batch-size", "12"}));
  EXPECT_EQ(plan::dry_run_largest_rank(six.on(6)).ranks_run.size(), size_t(plan::kDryRunRanks));
  // Without sharding every rank holds the same: rank 0 is run.
  const plan::DryRun plain =
      plan::dry_run_largest_rank((train::parse_train_args(tiny("tiny-llama", {"--global-batch-size", "4"}))).on(2));
  EXPECT_EQ(plain.ranks_run, std::vector<int>{0});
  EXPECT_EQ(plain.ranks, 2);
}

// Expert parallelism (E = 2 of 4 ranks) and context parallelism (C = 2 of 4): the estimator's per-rank
// parameters and AdamW states (num_experts / E experts a rank; the whole model with C) and the
// activations each layer keeps (the all-to-all's rows; seq / C tokens) are the dry run's, byte for
// byte; the step's peak within 10% (the plan's headroom: transient bytes of backward are not modelled,
// a few percent of these tiny models' steps, 3% for tiny-llama at 32 tokens without either).
TEST(DryRun, TheEstimatorPredictsEachRankUnderExpertAndContextParallelism) {
  const std::vector<std::vector<std::string>> runs = {
      tiny("tiny-qwen3-moe", {"--expert-model-parallel-size", "2", "--global-batch-size", "8"}),
      tiny("tiny-qwen3-moe", {"--expert-model-parallel-size", "2", "--global-batch-size", "8", "--bf16",
                              "--recompute-activation-function"}),
      // Sharded under EP: the reduce-scatter's pieces per group (dense over 4 ranks, experts over 4 / E).
      tiny("tiny-qwen3-moe", {"--expert-model-parallel-size", "4", "--global-batch-size", "8",
                              "--data-parallel-sharding-strategy", "optim_grads"}),
      tiny("tiny-qwen3-moe", {"--expert-model-parallel-size", "2", "--global-batch-size", "8", "--bf16",
                              "--data-parallel-sharding-strategy", "optim_grads_params"}),
      tiny("tiny-llama", {"--context-parallel-size", "2", "--global-batch-size", "4"}),
      tiny("tiny-qwen3", {"--context-parallel-size", "2", "--global-batch-size", "4", "--bf16", "--loss-compute-mode",
                          "chunk", "--loss-chunk-size", "8"}),
      // Eager attention under CP: the gathered K/V and each chunk's probabilities against its keys
      // (peaks measured 6.5% to 7.8% above the prediction).
      tiny("tiny-llama", {"--context-parallel-size", "2", "--global-batch-size", "4", "--attention", "eager",
                          "--attention-dropout", "0.1"}),
      tiny("tiny-llama", {"--context-parallel-size", "2", "--global-batch-size", "4", "--attention", "eager",
                          "--recompute-granularity", "selective", "--recompute-modules", "core_attn"}),
      tiny("tiny-gpt2", {"--context-parallel-size", "2", "--global-batch-size", "4", "--attention", "eager"}),
      tiny("tiny-qwen3", {"--context-parallel-size", "4", "--global-batch-size", "2", "--attention", "eager"}),
      // DeepSeek-V3: MLA (keys of 24, values of 16 a head), shared experts, router biases (buffers).
      tiny("tiny-deepseek-v3", {"--expert-model-parallel-size", "2", "--global-batch-size", "8"}),
      tiny("tiny-deepseek-v3", {"--context-parallel-size", "2", "--global-batch-size", "4", "--bf16"}),
      tiny("tiny-deepseek-v3", {"--context-parallel-size", "2", "--global-batch-size", "4", "--attention", "eager"}),
  };
  for (const std::vector<std::string>& flags : runs) {
    SCOPED_TRACE(joined(flags));
    const train::TrainArgs a = train::parse_train_args(flags);
    const plan::DryRun dry = plan::dry_run_largest_rank(a.on(4));  // sharded: the estimator's is the largest shard's
    const plan::TriageSettings s = plan::triage_settings(a.on(4));
    const plan::StepPeak p = plan::predict_step_peak(a.model, s);
    EXPECT_EQ(dry.device[MemoryCategory::parameter].peak, p.parameters);
    EXPECT_EQ(dry.device[MemoryCategory::optimizer_state].peak, p.optimizer_states);
    memory::ActivationInputs in = memory::activation_inputs(
        a.memory, a.micro_batch_size, a.seq_length / a.parallel.context, s.attention, s.precision.param_dtype());
    in.parallel = a.parallel;
    const memory::ActivationEstimate e = memory::estimate_activations(a.model, in);
    EXPECT_EQ(dry.activation_bytes_per_layer, e.layer_kept);
    const double ratio = double(dry.device.peak_allocated) / double(p.total);
    EXPECT_GT(ratio, 0.95) << dry.device.peak_allocated << " vs " << p.total;
    EXPECT_LT(ratio, 1.10) << dry.device.peak_allocated << " vs " << p.total;
  }
}

// DeepSeek-V4 under expert parallelism (its stacked experts' rows, nn/slab.h; hash-routed and top-k layers, CSA and
// HCA): the activations each layer keeps (the experts' received rows, the returned rows, the two row orders) are the
// dry run's to the byte, f32 and bf16 under ZeRO-3, and without sharding the parameters (buffers with them) too.
// The predictor gives every trained parameter AdamW states, where V4's CSA indexers get no gradient (as in
// transformers) and so none: the states' prediction is the dry run's plus exactly the indexers' 2 f32 moments.
TEST(DryRun, DeepSeekV4UnderExpertParallelismKeepsTheEstimatorsActivations) {
  const std::vector<std::vector<std::string>> runs = {
      tiny(kDeepseekV4, {"--expert-model-parallel-size", "2", "--global-batch-size", "8"}),
      tiny(kDeepseekV4, {"--expert-model-parallel-size", "4", "--global-batch-size", "8", "--bf16",
                         "--data-parallel-sharding-strategy", "optim_grads_params", "--mhc-recompute"}),
  };
  for (const std::vector<std::string>& flags : runs) {
    SCOPED_TRACE(joined(flags));
    const train::TrainArgs a = train::parse_train_args(flags);
    const plan::DryRun dry = plan::dry_run_largest_rank(a.on(4));
    const plan::TriageSettings s = plan::triage_settings(a.on(4));
    memory::ActivationInputs in =
        memory::activation_inputs(a.memory, a.micro_batch_size, a.seq_length, s.attention, s.precision.param_dtype());
    in.parallel = a.on(4).parallel;
    EXPECT_EQ(dry.activation_bytes_per_layer, memory::estimate_activations(a.model, in).layer_kept);
    if (a.on(4).parallel.sharded()) continue;
    const plan::StepPeak p = plan::predict_step_peak(a.model, s);
    EXPECT_EQ(dry.device[MemoryCategory::parameter].peak, p.parameters);
    nn::Init meta;
    meta.device = Device::meta();
    int64_t indexers = 0;
    for (const auto& [name, t] : models::create_model(a.model, meta)->named_parameters())
      if (name.find(".indexer.") != std::string::npos) indexers += t.numel();
    EXPECT_GT(indexers, 0);
    EXPECT_EQ(p.optimizer_states - dry.device[MemoryCategory::optimizer_state].peak, 8 * indexers);
  }
}

// Published shapes at 32k tokens, where activations and gradients are both large: the prediction is within 1%
// of the dry run's largest rank under context and expert parallelism with recompute, sharding and offload.
// (Until the predictor followed the gradients made part by part through backward, it put every gradient beside
// the activations' backward peak — which an output-discarding recompute puts in the last layer's backward,
// where almost none exist: qwen3-8b below was predicted 17% high.)
TEST(DryRun, AtLongSequencesThePredictionIsWithinOnePercentUnderContextAndExpertParallelism) {
  const auto run = [](const std::string& model, int ranks, const std::vector<std::string>& more) {
    return std::pair{
        ranks, with({"--model", model, "--mock-data", "--bf16", "--seq-length", "32768", "--attention", "flash",
                     "--micro-batch-size", "1", "--global-batch-size", std::to_string(ranks), "--train-iters", "2"},
                    more)};
  };
  const std::vector<std::pair<int, std::vector<std::string>>> runs = {
      run("qwen3-8b", 2,
          {"--context-parallel-size", "2", "--use-distributed-optimizer", "--recompute-activation-function",
           "--recompute-norm"}),
      run("qwen3-30b-a3b", 8,
          {"--expert-model-parallel-size", "8", "--recompute-modules", "moe", "--data-parallel-sharding-strategy",
           "optim_grads"}),
      run("qwen3-30b-a3b", 8,
          {"--expert-model-parallel-size", "4", "--context-parallel-size", "2", "--recompute-modules", "moe",
           "--activation-offload", "--offload-policy", "all"}),
  };
  for (const auto& [ranks, flags] : runs) {
    SCOPED_TRACE(joined(flags));
    const train::TrainArgs a = train::parse_train_args(flags).on(ranks);
    const plan::DryRun dry = plan::dry_run_largest_rank(a);
    const int64_t predicted = plan::predict_step_peak(a.model, plan::triage_settings(a)).total;
    const double ratio = double(dry.device.peak_allocated) / double(predicted);
    EXPECT_GT(ratio, 0.99) << dry.device.peak_allocated << " vs " << predicted;
    EXPECT_LT(ratio, 1.01) << dry.device.peak_allocated << " vs " << predicted;
  }
}

// Eager attention under context parallelism (C = 2, tiny-llama: hidden h = 64, a = 4 heads, a_kv = 2
// kv heads of d = 16, f = 176; b = 2, s = 16 tokens a rank of 32, N = bs, chunks of L = 8): each layer
// keeps N(16h + 8ad + 12f + 8) + 8·b·Cs·a_kv·d (the gathered K and V) + 4·a·b·(2C+1)·L² (each chunk's
// probabilities against the keys before it) bytes, on every rank (docs/memory.md).
TEST(DryRun, EagerAttentionUnderContextParallelKeepsTheFormulasBytesOnEveryRank) {
  const train::TrainArgs a =
      train::parse_train_args(tiny("tiny-llama", {"--context-parallel-size", "2", "--attention", "eager"}));
  const int64_t b = 2, s = 16, c = 2, n = b * s, l = s / 2, h = 64, heads = 4, d = 16, kv = 2 * d, f = 176;
  const int64_t layer =
      n * (16 * h + 8 * heads * d + 12 * f + 8) + 8 * b * c * s * kv + 4 * heads * b * (2 * c + 1) * l * l;
  EXPECT_EQ(layer, 143616);
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(plan::dry_run(a.on(2), r).activation_bytes_per_layer, std::vector<int64_t>(2, layer)) << r;
}

// --offload-policy core-attn under context parallelism offloads the attention core's saved tensors:
// ring attention's (flash) and the all-gathered K/V's (eager), as on one rank.
TEST(DryRun, CoreAttentionOffloadUnderContextParallelOffloadsTheCore) {
  for (const char* attention : {"flash", "eager"}) {
    const train::TrainArgs a =
        train::parse_train_args(tiny("tiny-llama", {"--context-parallel-size", "2", "--attention", attention,
                                                    "--activation-offload", "--offload-policy", "core-attn"}));
    EXPECT_GT(plan::dry_run(a.on(2), 0).host[MemoryCategory::host_offload].peak, 0) << attention;
  }
}

TEST(DryRun, RefusesWhatItCannotAccount) {
  auto error = [](const std::vector<std::string>& more) {
    return testing::error_of([&] { plan::dry_run(train::parse_train_args(tiny("tiny-gpt2", more))); });
  };
  EXPECT_NE(error({"--load", "/nonexistent"}).find("tidal plan --dry-run: --load and --pretrained read values"),
            std::string::npos);
  EXPECT_NE(error({"--use-distributed-optimizer", "--overlap-grad-reduce"})
                .find("tidal plan --dry-run: --overlap-grad-reduce is not dry-run: its reductions run on a stream"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              plan::dry_run((train::parse_train_args(tiny("tiny-gpt2", {}))).on(2), 2);
            }).find("[dist] a dry run's rank must be in [0, 2), got 2"),
            std::string::npos);
}

}  // namespace
}  // namespace tidal::train

namespace tidal::train {
namespace {

// Sharding never costs memory (Note [Reduce-scatter in rounds]): the per-rank device peak does not rise from
// no_shard to ZeRO-1, ZeRO-2 and ZeRO-3, on a layer-dominated model (issue 32's: 8 layers of hidden 128, with one
// micro-batch per rank and with two — ZeRO-2/3 then reduce bucket by bucket during backward, Note [Synchronous
// buckets] — and one of hidden 512) and an activation-dominated one (4 x 1024 tokens, two micro-batches per rank),
// on 2 and 4 ranks. The reduce-scatter's exchange goes in rounds, so its temporary is never a whole model; a
// smaller --ddp-bucket-size makes the rounds smaller, and the planner's prediction follows the dry run.
TEST(DryRun, ShardingNeverRaisesThePeak) {
  const std::vector<std::pair<std::vector<std::string>, int>> models = {
      // (flags, micro-batches per rank)
      {{"--num-layers", "8", "--hidden-size", "128", "--seq-length", "32", "--micro-batch-size", "1"}, 1},
      {{"--num-layers", "8", "--hidden-size", "128", "--seq-length", "32", "--micro-batch-size", "1"}, 2},
      {{"--num-layers", "8", "--hidden-size", "512", "--seq-length", "32", "--micro-batch-size", "1"}, 1},
      {{"--num-layers", "4", "--hidden-size", "128", "--seq-length", "1024", "--max-position-embeddings", "1024",
        "--micro-batch-size", "4"},
       2}};
  for (const auto& [m, accumulation] : models) {
    for (int ranks : {2, 4}) {
      int64_t last = std::numeric_limits<int64_t>::max();
      for (const std::string strategy : {"no_shard", "optim", "optim_grads", "optim_grads_params"}) {
        std::vector<std::string> flags = {"--model", "tiny-llama", "--mock-data", "--train-iters", "2"};
        flags.insert(flags.end(), m.begin(), m.end());
        if (strategy != "no_shard") flags.insert(flags.end(), {"--data-parallel-sharding-strategy", strategy});
        TrainArgs a = train::parse_train_args(flags);
        a.global_batch_size = a.micro_batch_size * ranks * accumulation;
        a = a.on(ranks);
        const plan::DryRun dry = plan::dry_run_largest_rank(a);
        SCOPED_TRACE(joined(m) + " x" + std::to_string(accumulation) + " on " + std::to_string(ranks) + " ranks, " +
                     strategy);
        EXPECT_LE(dry.device.peak_allocated, last);
        last = dry.device.peak_allocated;
        if (strategy == "no_shard") continue;
        const plan::StepPeak p = plan::predict_step_peak(a.model, plan::triage_settings(a));
        EXPECT_NEAR(double(p.total), double(dry.device.peak_allocated), 0.01 * double(dry.device.peak_allocated));
        // Smaller rounds: the same states and parameters, a temporary no larger; the same gradients, or fewer
        // where ZeRO-2/3 reduce by bucket (smaller buckets then).
        TrainArgs small = a;
        small.parallel.bucket_size = 4096;
        const plan::DryRun rounds = plan::dry_run(small, dry.rank);
        EXPECT_LE(rounds.device[MemoryCategory::temporary].peak, dry.device[MemoryCategory::temporary].peak);
        for (MemoryCategory c : {MemoryCategory::parameter, MemoryCategory::optimizer_state})
          EXPECT_EQ(rounds.device[c].peak, dry.device[c].peak) << category_name(c);
        if (a.parallel.reduces_by_bucket(accumulation, a.model.is_moe()))
          EXPECT_LE(rounds.device[MemoryCategory::gradient].peak, dry.device[MemoryCategory::gradient].peak);
        else
          EXPECT_EQ(rounds.device[MemoryCategory::gradient].peak, dry.device[MemoryCategory::gradient].peak);
      }
    }
  }
}

// Issue 32, sharding never costs memory: a step that reduces each gradient once reduce-scatters in place, in
// the whole gradients (Note [Reduce-scatter in place], optim/distributed_adamw.cpp), as Megatron's distributed
// optimizer does. At 2 ranks, one micro-batch each, every strategy's gradients peak at the unsharded run's
// 4P (no shard-sized sums beside them) and the sharded states lower the device peak below no_shard's.
TEST(DryRun, ShardedGradientsPeakAtTheUnshardedOnes) {
  int64_t no_shard_peak = 0, elements = 0;
  for (const std::string strategy : {"no_shard", "optim", "optim_grads", "optim_grads_params"}) {
    std::vector<std::string> flags = {"--model",
                                      "tiny-llama",
                                      "--mock-data",
                                      "--train-iters",
                                      "2",
                                      "--num-layers",
                                      "8",
                                      "--hidden-size",
                                      "128",
                                      "--seq-length",
                                      "32",
                                      "--micro-batch-size",
                                      "1",
                                      "--global-batch-size",
                                      "2"};
    if (strategy != "no_shard") flags.insert(flags.end(), {"--data-parallel-sharding-strategy", strategy});
    const TrainArgs a = train::parse_train_args(flags).on(2);
    const plan::DryRun dry = plan::dry_run_largest_rank(a);
    SCOPED_TRACE(strategy);
    if (strategy == "no_shard") {
      for (int64_t n : dry.parameter_numels) elements += n;
      no_shard_peak = dry.device.peak_allocated;
    } else {
      EXPECT_LT(dry.device.peak_allocated, no_shard_peak);
    }
    EXPECT_EQ(dry.device[MemoryCategory::gradient].peak, 4 * elements);
  }
}

}  // namespace
}  // namespace tidal::train
