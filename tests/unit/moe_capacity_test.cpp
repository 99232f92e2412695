// MoE token dropping (--moe-expert-capacity-factor, Megatron-LM's; models/moe.h): the capacity, the
// slots each drop policy keeps on hand-built routings, padding, the flags, and a block whose capacity
// drops nothing computing exactly what a block without one does.
#include <gtest/gtest.h>

#include <vector>

#include "tests/support/error_of.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/models/moe.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"
#include "tidal/rng.h"
#include "tidal/train/arguments.h"

namespace tidal::models {
namespace {

using testing::error_of;

TEST(MoeCapacity, IsMegatronsCeilOfTokensTimesTopKOverExpertsTimesTheFactor) {
  EXPECT_EQ(expert_capacity(10, 2, 4, 1.0), 5);   // 10 x 2 / 4 = 5
  EXPECT_EQ(expert_capacity(10, 2, 4, 1.25), 7);  // 6.25 -> 7
  EXPECT_EQ(expert_capacity(32, 2, 8, 0.5), 4);   // 4
  EXPECT_EQ(expert_capacity(3, 1, 8, 0.1), 1);    // 0.0375 -> 1
}

struct Rows {
  std::vector<int64_t> token, slot, expert;
  int64_t dropped = 0;
};

// capacity_routing of a (N, k) routing of `batch` sequences.
Rows route(const std::vector<int64_t>& chosen, const std::vector<double>& weights, int64_t k, int64_t batch,
           int64_t experts, double factor, ModelConfig::DropPolicy policy, bool pad = false) {
  ModelConfig c;
  c.moe_expert_capacity_factor = factor;
  c.moe_token_drop_policy = policy;
  c.moe_pad_expert_input_to_capacity = pad;
  const int64_t n = int64_t(chosen.size()) / k;
  Rows r;
  Tensor rows = capacity_routing(from_vector_i64(chosen, Shape{n, k}), from_vector(weights, {n, k}), batch, experts, c,
                                 r.dropped);
  const std::vector<int64_t> all = rows.to_vector<int64_t>();
  const size_t m = all.size() / 3;
  r.token.assign(all.begin(), all.begin() + long(m));
  r.slot.assign(all.begin() + long(m), all.begin() + long(2 * m));
  r.expert.assign(all.begin() + long(2 * m), all.end());
  return r;
}

using Policy = ModelConfig::DropPolicy;

// Four tokens of one sequence, top-1 of 2 experts, capacity ceil(4 / 2 x 1) = 2: expert 0 is chosen
// by tokens 0, 1, 2 (weights 0.5, 0.9, 0.7) and must drop one.
TEST(MoeCapacity, ProbsKeepsTheHighestWeightsPositionTheEarliest) {
  const std::vector<int64_t> chosen = {0, 0, 0, 1};
  const std::vector<double> weights = {0.5, 0.9, 0.7, 0.6};
  Rows probs = route(chosen, weights, 1, 1, 2, 1.0, Policy::probs);
  EXPECT_EQ(probs.token, (std::vector<int64_t>{1, 2, 3}));  // token 0 (0.5) dropped; rows in token order
  EXPECT_EQ(probs.slot, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(probs.expert, (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(probs.dropped, 1);
  Rows position = route(chosen, weights, 1, 1, 2, 1.0, Policy::position);
  EXPECT_EQ(position.token, (std::vector<int64_t>{0, 1, 3}));  // token 2, the latest, dropped
  EXPECT_EQ(position.dropped, 1);
  // A capacity of every token drops nothing, under both policies: the rows of no capacity.
  for (Policy p : {Policy::probs, Policy::position}) {
    Rows all = route(chosen, weights, 1, 1, 2, 2.0, p);
    EXPECT_EQ(all.token, (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(all.dropped, 0);
  }
}

// Top-2 of 3 experts over 3 tokens (slots n x 2 + j), capacity ceil(6 / 3 x 0.5) = 1.
TEST(MoeCapacity, TopTwoSlotsDropPerExpert) {
  const std::vector<int64_t> chosen = {0, 1, 1, 0, 2, 1};
  const std::vector<double> weights = {0.6, 0.4, 0.7, 0.3, 0.8, 0.2};
  Rows probs = route(chosen, weights, 2, 1, 3, 0.5, Policy::probs);
  // expert 0: slots 0 (0.6), 3 (0.3) -> 0; expert 1: slots 1 (0.4), 2 (0.7), 5 (0.2) -> 2; expert 2: slot 4.
  EXPECT_EQ(probs.slot, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(probs.token, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(probs.expert, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(probs.dropped, 3);
  Rows position = route(chosen, weights, 2, 1, 3, 0.5, Policy::position);
  EXPECT_EQ(position.slot, (std::vector<int64_t>{0, 1, 4}));
  EXPECT_EQ(position.dropped, 3);
}

// Positions are Megatron's [sequence, batch] order: with 2 sequences of 2 tokens (token b x 2 + t),
// position t x 2 + b, so the earliest are token 0 (b 0, t 0) and token 2 (b 1, t 0). Equal weights
// under probs: the earlier position wins too.
TEST(MoeCapacity, PositionIsSequenceMajorAndBreaksTies) {
  const std::vector<int64_t> chosen = {0, 0, 0, 0};
  const std::vector<double> weights = {0.5, 0.5, 0.5, 0.5};
  EXPECT_EQ(route(chosen, weights, 1, 2, 2, 1.0, Policy::position).token, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(route(chosen, weights, 1, 2, 2, 1.0, Policy::probs).token, (std::vector<int64_t>{0, 2}));
}

// Padding completes each expert to min(capacity, N) rows with the earliest tokens that did not choose
// it; their slot is N x k (a zero weight).
TEST(MoeCapacity, PaddingCompletesEveryExpertWithZeroWeightRows) {
  const std::vector<int64_t> chosen = {0, 0, 0, 1};
  const std::vector<double> weights = {0.5, 0.9, 0.7, 0.6};
  Rows r = route(chosen, weights, 1, 1, 2, 1.0, Policy::probs, /*pad=*/true);
  EXPECT_EQ(r.token, (std::vector<int64_t>{1, 2, 3, 0}));
  EXPECT_EQ(r.slot, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(r.expert, (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(r.dropped, 1);
}

// tiny-qwen3-moe's block: output and gradients with `factor` (0: none) and padding.
std::vector<Tensor> run_block(double factor, bool pad = false) {
  ModelConfig c = preset("tiny-qwen3-moe");
  c.moe_expert_capacity_factor = factor;
  c.moe_pad_expert_input_to_capacity = pad;
  manual_seed(3);
  SparseMoeBlock block(c, nn::Init{}, nullptr);
  Tensor x = randn({2, 8, c.hidden_size}).set_requires_grad(true);
  RouterStats stats;
  Tensor y = block.forward(x, stats);
  sum(mul(y, y)).backward();
  std::vector<Tensor> out = {y.detach(), x.grad()};
  for (const auto& [name, p] : block.named_parameters()) out.push_back(p.grad().defined() ? p.grad() : zeros_like(p));
  return out;
}

double max_difference(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(double(x[i]) - double(y[i])));
  return worst;
}

TEST(MoeCapacity, ALargeFactorIsNoCapacityBitForBit) {
  take_dropped_slots();
  const std::vector<Tensor> none = run_block(0), large = run_block(1e6);
  ASSERT_EQ(none.size(), large.size());
  for (size_t i = 0; i < none.size(); ++i) EXPECT_EQ(max_difference(none[i], large[i]), 0.0) << i;
  const DroppedSlots d = take_dropped_slots();
  EXPECT_EQ(d.routed, 2 * 8 * 2);  // the capacity's forward: 16 tokens x top-2
  EXPECT_EQ(d.dropped, 0);
}

// A small capacity drops (and says how many); padding changes which rows run, not the result (a
// zero-weight row adds nothing), up to the order of the experts' sums.
TEST(MoeCapacity, DropsChangeTheResultPaddingDoesNot) {
  take_dropped_slots();
  const std::vector<Tensor> none = run_block(0), small = run_block(0.5);
  const DroppedSlots d = take_dropped_slots();
  EXPECT_GT(d.dropped, 0);
  EXPECT_LE(d.dropped, d.routed);
  EXPECT_GT(max_difference(none[0], small[0]), 1e-4);
  const std::vector<Tensor> padded = run_block(0.5, /*pad=*/true);
  for (size_t i = 0; i < small.size(); ++i) EXPECT_LE(max_difference(small[i], padded[i]), 1e-6) << i;
}

TEST(MoeCapacity, FlagsAreCheckedOnce) {
  auto model = [](std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"--mock-data"});
    return train::parse_train_args(argv).model;
  };
  const ModelConfig m = model({"--model", "tiny-qwen3-moe", "--moe-expert-capacity-factor", "1.25",
                               "--moe-token-drop-policy", "position", "--moe-pad-expert-input-to-capacity"});
  EXPECT_EQ(m.moe_expert_capacity_factor, 1.25);
  EXPECT_EQ(m.moe_token_drop_policy, Policy::position);
  EXPECT_TRUE(m.moe_pad_expert_input_to_capacity);
  const ModelConfig d = model({"--model", "tiny-qwen3-moe"});
  EXPECT_EQ(d.moe_expert_capacity_factor, 0.0);
  EXPECT_EQ(d.moe_token_drop_policy, Policy::probs);
  auto error = [&](std::vector<std::string> argv) { return error_of([&] { model(argv); }); };
  EXPECT_NE(error({"--model", "tiny-qwen3-moe", "--moe-expert-capacity-factor", "0"}).find("must be > 0"),
            std::string::npos);
  EXPECT_NE(error({"--model", "tiny-qwen3-moe", "--moe-expert-capacity-factor", "inf"}).find("must be a number"),
            std::string::npos);
  EXPECT_NE(error({"--model", "tiny-qwen3-moe", "--moe-expert-capacity-factor", "-1"}).find("must be in [0,"),
            std::string::npos);
  EXPECT_NE(error({"--model", "tiny-llama", "--moe-expert-capacity-factor", "1"}).find("is for MoE models"),
            std::string::npos);
  // DeepSeek-V4's MoE runs every routed slot: refused, never silently ignored.
  EXPECT_NE(error({"--config", TIDAL_SOURCE_DIR "/tests/fixtures/hf/tiny_deepseek_v4_csa/config.json",
                   "--moe-expert-capacity-factor", "1"})
                .find("not supported for deepseek_v4 yet"),
            std::string::npos);
  EXPECT_NE(error({"--model", "tiny-qwen3-moe", "--moe-expert-capacity-factor", "1", "--moe-token-drop-policy", "x"})
                .find("--moe-token-drop-policy must be probs or position"),
            std::string::npos);
  EXPECT_NE(error({"--model", "tiny-qwen3-moe", "--moe-token-drop-policy", "position"})
                .find("--moe-token-drop-policy needs --moe-expert-capacity-factor"),
            std::string::npos);
  EXPECT_NE(error({"--model", "tiny-qwen3-moe", "--moe-pad-expert-input-to-capacity"})
                .find("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor"),
            std::string::npos);
}

// Megatron-LM's --moe-router-enable-expert-bias and --moe-router-bias-update-rate (models/moe.h Router).
TEST(MoeExpertBiasFlags, ParsedOnceIntoTheRateAndRefusedWhereThereIsNoBias) {
  auto model = [](std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"--mock-data"});
    return train::parse_train_args(argv).model;
  };
  EXPECT_EQ(model({"--model", "tiny-deepseek-v3"}).moe_router_bias_update_rate, 0.0);
  EXPECT_EQ(model({"--model", "tiny-deepseek-v3", "--moe-router-enable-expert-bias"}).moe_router_bias_update_rate,
            1e-3);
  EXPECT_EQ(
      model({"--model", "tiny-deepseek-v3", "--moe-router-enable-expert-bias", "--moe-router-bias-update-rate", "0.01"})
          .moe_router_bias_update_rate,
      0.01);
  auto error = [&](std::vector<std::string> argv) { return error_of([&] { model(argv); }); };
  EXPECT_NE(error({"--model", "tiny-qwen3-moe", "--moe-router-enable-expert-bias"}).find("have a correction bias"),
            std::string::npos);
  EXPECT_NE(error({"--model", "tiny-deepseek-v3", "--moe-router-bias-update-rate", "0.01"})
                .find("needs --moe-router-enable-expert-bias"),
            std::string::npos);
  EXPECT_NE(
      error({"--model", "tiny-deepseek-v3", "--moe-router-enable-expert-bias", "--moe-router-bias-update-rate", "0"})
          .find("must be > 0"),
      std::string::npos);
  EXPECT_NE(error({"--model", "tiny-deepseek-v3", "--kv-channels", "32"}).find("--kv-channels is not for deepseek_v3"),
            std::string::npos);
}

}  // namespace
}  // namespace tidal::models
