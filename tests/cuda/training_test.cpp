// Training on Device::cuda(0) end to end (docs/training.md, "Devices"): the tiny presets train like
// the CPU (same seed, bf16-sized tolerance: the GPU adds in another order), every memory feature leaves
// the GPU run's losses alone as it does the CPU's (tests/integration/memory_savings_train_test.cpp),
// and the device and host peaks are those tidal plan --dry-run predicts for the same flags
// (tests/integration/dry_run_test.cpp). Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/cuda/backend/cuda/gemm_workspaces.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/integration/train_helpers.h"
#include "tests/support/peaks_since.h"
#include "tidal/allocator.h"
#include "tidal/plan/dry_run.h"
#include "tidal/seam/kernels.h"

namespace tidal::train {
namespace {

const std::vector<std::string> kOnCuda = {"--device", "cuda"};

// Micro-batches of 2 x 32 tokens of mock data, one per step unless `more` gives --global-batch-size.
std::vector<std::string> tiny(const std::string& model, int iters, const std::vector<std::string>& more = {}) {
  std::vector<std::string> flags =
      with({"--model", model, "--mock-data", "--seq-length", "32", "--micro-batch-size", "2", "--train-iters",
            std::to_string(iters), "--lr-warmup-iters", "0", "--eval-interval", "0", "--log-interval", "100"},
           more);
  if (std::find(more.begin(), more.end(), "--global-batch-size") == more.end())
    flags = with(flags, {"--global-batch-size", "2"});
  return flags;
}

TEST(CudaTraining, TinyPresetsTrainTenStepsLikeTheCpu) {
  TIDAL_REQUIRE_CUDA();
  for (const char* model : {"tiny-gpt2", "tiny-llama", "tiny-qwen3-moe"}) {
    SCOPED_TRACE(model);
    const std::vector<std::string> flags = tiny(model, 10, {"--global-batch-size", "4"});
    const TrainResult cpu = train(flags);
    const TrainResult gpu = train(with(flags, kOnCuda));
    ASSERT_EQ(gpu.losses.size(), 10u);
    ASSERT_EQ(cpu.losses.size(), 10u);
    // The same initial weights (drawn on the host) and batches: the first loss agrees closely, the
    // later ones within bf16's precision after ten updates.
    EXPECT_NEAR(gpu.losses[0], cpu.losses[0], 1e-4 * cpu.losses[0]);
    for (size_t i = 0; i < cpu.losses.size(); ++i) {
      EXPECT_TRUE(std::isfinite(gpu.losses[i])) << "iteration " << i + 1;
      EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 1e-2 * cpu.losses[i]) << "iteration " << i + 1;
    }
  }
}

// A DeepSeek-V4 fixture's config (tests/fixtures/hf) on mock data: micro-batches of 2 x 24 tokens, one per step.
std::vector<std::string> tiny_v4(const char* name, int iters, const std::vector<std::string>& more = {}) {
  return with({"--config", std::string(TIDAL_SOURCE_DIR "/tests/fixtures/hf/") + name + "/config.json", "--mock-data",
               "--seq-length", "24", "--micro-batch-size", "2", "--global-batch-size", "2", "--train-iters",
               std::to_string(iters), "--lr-warmup-iters", "0", "--eval-interval", "0", "--log-interval", "100"},
              more);
}

// DeepSeek-V4's layers on the GPU: sliding windows and heavily compressed entries (attention_with_lse: compressed
// keys, the log-sum-exps merged with a sink, so their gradient enters the backward), compressed sparse attention over
// each query's kept entries (sparse_attention_with_lse) and mHC's Sinkhorn-Knopp projection, in f32 and bf16.
TEST(CudaTraining, DeepSeekV4TrainsLikeTheCpu) {
  TIDAL_REQUIRE_CUDA();
  for (const char* name : {"tiny_deepseek_v4", "tiny_deepseek_v4_csa", "tiny_deepseek_v4_hca"})
    for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{{}, {"--bf16"}}) {
      const std::vector<std::string> flags = tiny_v4(name, 5, extra);
      SCOPED_TRACE(joined(flags));
      const TrainResult cpu = train(flags);
      const TrainResult gpu = train(with(flags, kOnCuda));
      ASSERT_EQ(gpu.losses.size(), 5u);
      ASSERT_EQ(cpu.losses.size(), 5u);
      const double tol = extra.empty() ? 1e-2 : 2e-2;
      if (extra.empty()) {
        EXPECT_NEAR(gpu.losses[0], cpu.losses[0], 1e-4 * cpu.losses[0]);
      }
      for (size_t i = 0; i < cpu.losses.size(); ++i) {
        EXPECT_TRUE(std::isfinite(gpu.losses[i])) << "iteration " << i + 1;
        EXPECT_NEAR(gpu.losses[i], cpu.losses[i], tol * cpu.losses[i]) << "iteration " << i + 1;
      }
    }
}

TEST(CudaTraining, Bf16TrainsLikeTheCpu) {
  TIDAL_REQUIRE_CUDA();
  const std::vector<std::string> flags = tiny("tiny-llama", 10, {"--bf16"});
  const TrainResult cpu = train(flags);
  const TrainResult gpu = train(with(flags, kOnCuda));
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i)
    EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 2e-2 * cpu.losses[i]) << "iteration " << i + 1;
}

// Recompute replays the same kernels on the same inputs, offload and the swapped optimizer move bytes
// and one chunk of loss covering the tokens makes the same GEMMs: each is the plain GPU run, bitwise.
TEST(CudaTraining, MemoryFeaturesLeaveTheLossesAlone) {
  TIDAL_REQUIRE_CUDA();
  for (const char* model : {"tiny-gpt2", "tiny-llama"}) {
    const std::vector<std::string> base = with(tiny(model, 3, {"--global-batch-size", "4"}), kOnCuda);
    const TrainResult plain = train(base);
    ASSERT_EQ(plain.losses.size(), 3u);
    for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
             {"--recompute-granularity", "selective"},
             {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"},
             {"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "1"},
             {"--recompute-activation-function", "--recompute-norm"},
             {"--activation-offload"},
             {"--activation-offload", "--offload-policy", "layer-input"},
             {"--loss-compute-mode", "chunk", "--loss-chunk-size", "64"},
             {"--swap-optimizer", "--swap-optimizer-times", "4"},
         }) {
      SCOPED_TRACE(std::string(model) + " " + joined(extra));
      EXPECT_EQ(train(with(base, extra)).losses, plain.losses);
    }
    // Chunks of 16 tokens: the same numbers up to the order of additions.
    const TrainResult chunked = train(with(base, {"--loss-compute-mode", "chunk", "--loss-chunk-size", "16"}));
    ASSERT_EQ(chunked.losses.size(), plain.losses.size());
    for (size_t i = 0; i < plain.losses.size(); ++i)
      EXPECT_NEAR(chunked.losses[i], plain.losses[i], 1e-5 * plain.losses[i]) << model;
  }
}

// tidal plan --dry-run (meta device) of `--device cuda` against the GPU run of the same flags: device and
// host peaks, per category and at the peak, to the byte (for the MoE model, what its routing leaves alone). The dry run
// sizes the kernels' scratch as the CUDA backend does (seam/planned_device.h: cuDNN's attention workspace, cuBLASLt's);
// a scratch it does not model shows here as a difference in `temporary`.
TEST(CudaTraining, DevicePeaksEqualTheDryRunsPrediction) {
  TIDAL_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  for (const char* model : {"tiny-gpt2", "tiny-llama", "tiny-qwen3-moe"})
    for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
             {},
             {"--recompute-granularity", "selective"},
             {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"},
             {"--loss-compute-mode", "chunk", "--loss-chunk-size", "16"},
             {"--activation-offload"},
             {"--swap-optimizer", "--swap-optimizer-times", "4"},
             {"--bf16"},
         }) {
      const std::vector<std::string> flags = tiny(model, 2, extra);
      SCOPED_TRACE(joined(flags));
      const plan::DryRun dry = plan::dry_run(parse_train_args(with(flags, kOnCuda)));  // planned for cuda
      testing::release_cuda_gemm_workspaces();  // the run makes cuBLASLt's workspace as a new process does
      Allocator& device = device_allocator(dev);
      Allocator& host = host_allocator(dev);
      const MemoryStats device_before = device.stats(), host_before = host.stats();
      train(with(flags, kOnCuda));
      const MemoryStats real_device = testing::peaks_since(device_before, device.stats());
      if (std::string(model) == "tiny-qwen3-moe") {
        // A real MoE run routes its tokens unevenly, the dry run evenly (models/moe.cpp; the CPU's
        // DryRun.MoeMatchesTheRealRunsStatesAndTheEstimatorsActivations): what does not depend on the
        // routing is equal to the byte.
        for (MemoryCategory c : {MemoryCategory::parameter, MemoryCategory::gradient, MemoryCategory::optimizer_state})
          EXPECT_EQ(dry.device[c].peak, real_device[c].peak) << category_name(c);
      } else {
        testing::expect_same_peaks(dry.device, real_device, "device");
        testing::expect_same_peaks(dry.host, testing::peaks_since(host_before, host.stats()), "host");
      }
      EXPECT_GT(dry.device.peak_allocated, 0);
    }
}

// A dry run planned for cuda sizes flash attention's workspace as the CUDA backend does, on a machine
// without a GPU too (its layout queries touch no device): in bf16 the fused backward's dP buffer and row
// sums (cudnn_sdpa.h) instead of the CPU kernel's tiles, and cuBLASLt's kept workspace. Runs in CI.
TEST(CudaDryRun, PlansTheCudaAttentionWorkspaceWithoutAGpu) {
  const std::vector<std::string> flags = tiny("tiny-llama", 2, {"--bf16"});
  const TrainArgs args = parse_train_args(flags);
  const plan::DryRun cpu = plan::dry_run(args);
  const plan::DryRun gpu = plan::dry_run(parse_train_args(with(flags, kOnCuda)));
  const size_t temporary = size_t(MemoryCategory::temporary);
  auto r64 = [](int64_t n) { return (n + 63) / 64 * 64; };
  const int64_t b = 2, t = 32, h = args.model.num_attention_heads, d = args.model.head_size();
  ASSERT_NE(args.model.kv_heads(), h);  // GQA: the per-query-head key/value gradient buffer
  const int64_t fused_backward = 4 * (r64(b * h * t) + r64(b * h * r64(t) * r64(t) / 2) + b * h * t * d + 64);  // bytes
  const int64_t kept = device_kernels(Device::cuda(0)).matmul_kept_workspace();  // cuBLASLt's, 32 MiB
  EXPECT_EQ(kept, int64_t(32) << 20);
  EXPECT_GE(gpu.device.category[temporary].peak, fused_backward + kept);
  EXPECT_LT(cpu.device.category[temporary].peak, kept);
  EXPECT_NE(gpu.device.category[temporary].peak, cpu.device.category[temporary].peak);
  EXPECT_EQ(gpu.parameter_numels, cpu.parameter_numels);
}

// A dry run of DeepSeek-V4 planned for cuda sizes what the CUDA backend sizes for it (flash attention's workspaces
// with compressed keys, the sparse attention's backward workspace), on a machine without a GPU too. Runs in CI.
TEST(CudaDryRun, PlansDeepSeekV4WithoutAGpu) {
  for (const char* name : {"tiny_deepseek_v4_csa", "tiny_deepseek_v4_hca"})
    for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{{}, {"--bf16"}}) {
      const std::vector<std::string> flags = tiny_v4(name, 2, extra);
      SCOPED_TRACE(joined(flags));
      const plan::DryRun cpu = plan::dry_run(parse_train_args(flags));
      const plan::DryRun gpu = plan::dry_run(parse_train_args(with(flags, kOnCuda)));
      EXPECT_EQ(gpu.parameter_numels, cpu.parameter_numels);
      EXPECT_GT(gpu.device.peak_allocated, 0);
    }
}

}  // namespace
}  // namespace tidal::train
