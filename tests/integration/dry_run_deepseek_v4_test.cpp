// DeepSeek-V4 through tidal train, and the dry run (plan/dry_run.h) of it (the estimator against the dry run:
// plan_deepseek_v4_test.cpp); and it measures DeepSeek-V4's own recompute flags (--recompute-csa-attention,
// --mhc-recompute), alone and stacked with full block recompute, the moe checkpoint, activation offload, bf16,
// chunked loss and accumulation: each layer keeps what memory/deepseek_v4_savings.h says less, the parameters,
// gradients and AdamW states peak as the real run's, and the flags take off the activation peak exactly what they
// take off the real run's (the two runs differ only by the MoE's routing: the dry run routes evenly).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "tests/integration/train_helpers.h"
#include "tests/support/peaks_since.h"
#include "tidal/allocator.h"
#include "tidal/memory/deepseek_v4_savings.h"
#include "tidal/plan/dry_run.h"

namespace tidal::train {
namespace {

// The CSA/HCA/CSA fixture's config on mock data: micro-batches of 2 x 32 tokens, one per step unless `more` gives
// --global-batch-size.
std::vector<std::string> v4(const std::vector<std::string>& more, int iters = 2) {
  std::vector<std::string> flags =
      with({"--config", TIDAL_SOURCE_DIR "/tests/fixtures/hf/tiny_deepseek_v4_csa/config.json", "--mock-data",
            "--seq-length", "32", "--micro-batch-size", "2", "--train-iters", std::to_string(iters),
            "--lr-warmup-iters", "0", "--eval-interval", "0", "--log-interval", "100"},
           more);
  if (std::find(more.begin(), more.end(), "--global-batch-size") == more.end())
    flags = with(flags, {"--global-batch-size", "2"});
  return flags;
}

// The device allocator's peaks over a real run of `flags`.
MemoryStats real_peaks(const std::vector<std::string>& flags) {
  Allocator& cpu = device_allocator(Device::cpu());
  const MemoryStats before = cpu.stats();
  train(flags);
  return testing::peaks_since(before, cpu.stats());
}

// The parameters, gradients and AdamW states peak as the real run's.
void expect_real_states(const MemoryStats& dry, const MemoryStats& real) {
  for (MemoryCategory c : {MemoryCategory::parameter, MemoryCategory::gradient, MemoryCategory::optimizer_state})
    EXPECT_EQ(dry[c].peak, real[c].peak) << category_name(c);
}

// DeepSeek-V4 (every attention type: CSA, HCA; hash-routed and top-k MoE; mHC): its dry run holds the real run's
// parameters, gradients and AdamW states under each feature it supports (the activations differ only by routing: the
// dry run routes evenly), so tidal plan --dry-run measures it.
TEST(DryRun, DeepSeekV4MatchesTheRealRunsStates) {
  for (const std::vector<std::string>& f : std::vector<std::vector<std::string>>{
           {},
           {"--bf16"},
           {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"},
           {"--recompute-granularity", "selective", "--recompute-modules", "moe"},
           {"--loss-compute-mode", "chunk", "--loss-chunk-size", "16"},
           {"--global-batch-size", "4"}}) {
    const std::vector<std::string> flags = v4(f);
    SCOPED_TRACE(joined(flags));
    const plan::DryRun dry = plan::dry_run(parse_train_args(flags));
    expect_real_states(dry.device, real_peaks(flags));
    EXPECT_GT(dry.device[MemoryCategory::activation].peak, 0);
    // --report-memory names every saved tensor's module: the mHC mappings (attn_hc, ffn_hc), the compressors, the
    // composed attention core (self_attn), the MoE (mlp).
    std::set<std::string> modules;
    for (const autograd::SavedTensorRecord& r : dry.saved) {
      if (r.layer < 0 || r.op == "checkpoint_input") continue;  // a full-recompute checkpoint's input: the layer's
      EXPECT_FALSE(r.module.empty()) << r.op << " of layer " << r.layer;
      modules.insert(r.module);
    }
    if (!f.empty()) continue;
    for (const char* m :
         {"model.layers.0.attn_hc", "model.layers.0.ffn_hc", "model.layers.0.self_attn",
          "model.layers.0.self_attn.compressor", "model.layers.1.self_attn.compressor", "model.layers.0.mlp"})
      EXPECT_EQ(modules.count(m), 1u) << m;
  }
}

TEST(DryRun, DeepSeekV4RecomputeFlagsAreMeasured) {
  const std::vector<std::string> v4_flags = {"--recompute-csa-attention", "--mhc-recompute"};
  for (const std::vector<std::string>& base : std::vector<std::vector<std::string>>{
           {},
           {"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "1"},
           {"--recompute-granularity", "selective", "--recompute-modules", "moe"},
           {"--bf16"},
           {"--loss-compute-mode", "chunk", "--loss-chunk-size", "16", "--global-batch-size", "4"},
           {"--activation-offload", "--offload-policy", "all"}}) {
    for (const std::vector<std::string>& mine :
         std::vector<std::vector<std::string>>{{v4_flags[0]}, {v4_flags[1]}, v4_flags}) {
      const std::vector<std::string> flags = v4(with(base, mine)), plain = v4(base);
      SCOPED_TRACE(joined(flags));
      const TrainArgs a = parse_train_args(flags);
      const plan::DryRun dry = plan::dry_run(a), dry_plain = plan::dry_run(parse_train_args(plain));
      const MemoryStats real = real_peaks(flags), real_plain = real_peaks(plain);
      expect_real_states(dry.device, real);
      const int64_t activation = dry.device[MemoryCategory::activation].peak;
      EXPECT_EQ(dry_plain.device[MemoryCategory::activation].peak - activation,
                real_plain[MemoryCategory::activation].peak - real[MemoryCategory::activation].peak);
      if (a.memory.offload.enabled) continue;  // what a layer keeps on the device is then what offload leaves
      const DType dtype = a.precision.param_dtype();
      ASSERT_EQ(dry.activation_bytes_per_layer.size(), 3u);
      for (size_t l = 0; l < 3; ++l) {
        const models::LayerRecompute& p = a.memory.recompute_plan[l];
        EXPECT_EQ(dry_plain.activation_bytes_per_layer[l] - dry.activation_bytes_per_layer[l],
                  (p.csa_attention ? memory::csa_attention_saving(a.model, int64_t(l), 2, 32, dtype, a.attention) : 0) +
                      (p.mhc ? memory::mhc_saving(a.model, 2, 32, dtype) : 0))
            << "layer " << l;
      }
    }
  }
}

// Through tidal train: with the flags every step's loss is the plain run's, bit for bit (each step's update follows
// from bitwise-equal gradients), over 4 steps, next to bf16, chunked loss with accumulation, offload and full block.
TEST(DeepSeekV4Train, TheRecomputeFlagsKeepEveryStepsLoss) {
  for (const std::vector<std::string>& base : std::vector<std::vector<std::string>>{
           {"--bf16"},
           {"--loss-compute-mode", "chunk", "--loss-chunk-size", "16", "--global-batch-size", "4"},
           {"--activation-offload"},
           {"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "1"}}) {
    const std::vector<std::string> plain = v4(base, 4);
    SCOPED_TRACE(joined(plain));
    const TrainResult a = train(plain), b = train(with(plain, {"--recompute-csa-attention", "--mhc-recompute"}));
    ASSERT_EQ(a.losses.size(), 4u);
    EXPECT_EQ(a.losses, b.losses);
  }
}

}  // namespace
}  // namespace tidal::train
