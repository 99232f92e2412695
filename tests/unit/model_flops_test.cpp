// Model FLOPs per token (train/metrics.h), the figure tidal's GFLOP/s and MFU are made of.
#include <gtest/gtest.h>

#include "tidal/models/config.h"
#include "tidal/train/metrics.h"

namespace tidal::train {
namespace {

// Llama-3.1-8B at 4096 tokens by hand: 6 x (the multiply-adds of every projection, the MLP and the
// head) + 6 x 2 x 4096 x 4096 per layer for q k^T and p v (counted in full, as Megatron-LM does).
TEST(ModelFlops, Llama31EightBByHand) {
  const models::ModelConfig c = models::preset("llama3.1-8b");
  const double d = 4096, kv = 1024, f = 14336, v = 128256, s = 4096, layers = 32;
  const double macs = layers * (d * d + 2 * d * kv + d * d + 3 * d * f + 2 * s * d) + d * v;
  EXPECT_DOUBLE_EQ(training_flops_per_token(c, 4096), 6 * macs);
}

// A sliding layer's query meets min(window, seq) keys: Mistral 7B v0.1 (4096-key windows) at 32768
// tokens costs what v0.3's shape costs at 4096 keys, plus nothing; below the window both agree.
TEST(ModelFlops, SlidingWindowsCountTheKeysInTheWindow) {
  models::ModelConfig windowed = models::preset("mistral-7b-v0.1");
  models::ModelConfig full = windowed;
  full.sliding_window = 0;
  full.layer_types.clear();
  EXPECT_DOUBLE_EQ(training_flops_per_token(windowed, 32768), training_flops_per_token(full, 4096));
  EXPECT_DOUBLE_EQ(training_flops_per_token(windowed, 1024), training_flops_per_token(full, 1024));
  EXPECT_LT(training_flops_per_token(windowed, 32768), training_flops_per_token(full, 32768));
}

// DeepSeek-V3 at 4096 tokens by hand: MLA's projections (q through its LoRA, kv_a, kv_b, o), the core over
// query/key heads of 192 and value heads of 128, 3 dense layers, 58 sparse ones (router, 8 routed and 1
// shared expert of 2048 a token), the head. Its parameters active per token are DeepSeek's "37B activated"
// (the embedding and the 247 experts a token skips aside).
TEST(ModelFlops, DeepseekV3ByHand) {
  const models::ModelConfig c = models::preset("deepseek-v3");
  const double d = 7168, h = 128, s = 4096, v = 129280;
  const double attention = d * 1536 + 1536 * h * 192 + d * (512 + 64) + 512 * h * (128 + 128) + h * 128 * d;
  const double core = s * h * (192 + 128);
  const double dense = 3 * d * 18432, sparse = d * 256 + 3 * d * 2048 * (8 + 1);
  const double macs = 61 * (attention + core) + 3 * dense + 58 * sparse + d * v;
  EXPECT_DOUBLE_EQ(training_flops_per_token(c, 4096), 6 * macs);
  const double active = macs - 61 * core + d * v /* the embedding */;
  EXPECT_NEAR(active / 1e9, 37.5, 0.5);
}

}  // namespace
}  // namespace tidal::train
