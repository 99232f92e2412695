// train/mtp_batch.h: each multi-token-prediction depth's ids and targets are the micro-batch's rolled left by the
// depth (0 and -100 rolled in, as Megatron-LM's roll_tensor), a context-parallel rank gets its two chunks of them,
// and each depth's weights over the ranks of a group add up to 1 (its mean over the whole micro-batch).
#include <gtest/gtest.h>

#include "tidal/ops/ring_attention.h"
#include "tidal/train/mtp_batch.h"

namespace tidal::train {
namespace {

Tensor tokens_of(const std::vector<int64_t>& v, int64_t b) { return from_vector_i64(v, {b, int64_t(v.size()) / b}); }

TEST(MtpBatch, DepthsAreTheRollsOfIdsAndTargets) {
  // One sample of T = 6 inputs: tokens 10..16; targets 11..16 with 13 not trained (instruction labels).
  const Tensor tokens = tokens_of({10, 11, 12, 13, 14, 15, 16}, 1);
  const Tensor labels = tokens_of({-100, 11, 12, -100, 14, 15, 16}, 1);
  const memory::MtpInputs m = mtp_inputs(tokens, labels, 2, 1, 0, Device::cpu());
  ASSERT_EQ(m.ids.size(), 2u);
  EXPECT_EQ(m.ids[0].to_vector<int64_t>(), (std::vector<int64_t>{11, 12, 13, 14, 15, 0}));
  EXPECT_EQ(m.targets[0].to_vector<int64_t>(), (std::vector<int64_t>{12, -100, 14, 15, 16, -100}));
  EXPECT_EQ(m.ids[1].to_vector<int64_t>(), (std::vector<int64_t>{12, 13, 14, 15, 0, 0}));
  EXPECT_EQ(m.targets[1].to_vector<int64_t>(), (std::vector<int64_t>{-100, 14, 15, 16, -100, -100}));
  EXPECT_EQ(m.weights, (std::vector<double>{1.0, 1.0}));
  // Without labels the targets are the tokens'.
  const memory::MtpInputs plain = mtp_inputs(tokens, Tensor(), 1, 1, 0, Device::cpu());
  EXPECT_EQ(plain.targets[0].to_vector<int64_t>(), (std::vector<int64_t>{12, 13, 14, 15, 16, -100}));
}

TEST(MtpBatch, ContextParallelRanksTakeTheirChunksAndShares) {
  // Two samples of T = 8, C = 2: each rank holds 2 chunks of 2 positions (rows from context_rows).
  std::vector<int64_t> v;
  for (int64_t i = 0; i < 18; ++i) v.push_back(100 + i);
  const Tensor tokens = tokens_of(v, 2);  // (2, 9)
  const memory::MtpInputs whole = mtp_inputs(tokens, Tensor(), 3, 1, 0, Device::cpu());
  double weights = 0;
  for (int rank = 0; rank < 2; ++rank) {
    const memory::MtpInputs m = mtp_inputs(tokens, Tensor(), 3, 2, rank, Device::cpu());
    const std::vector<int64_t> rows = context_rows(8, 2, rank);
    for (size_t k = 0; k < 3; ++k) {
      const std::vector<int64_t> ids = m.ids[k].to_vector<int64_t>(), all = whole.ids[k].to_vector<int64_t>();
      const std::vector<int64_t> t = m.targets[k].to_vector<int64_t>(), all_t = whole.targets[k].to_vector<int64_t>();
      ASSERT_EQ(ids.size(), 2 * rows.size());
      for (int64_t r = 0; r < 2; ++r)
        for (size_t j = 0; j < rows.size(); ++j) {
          EXPECT_EQ(ids[size_t(r) * rows.size() + j], all[size_t(r * 8 + rows[j])]);
          EXPECT_EQ(t[size_t(r) * rows.size() + j], all_t[size_t(r * 8 + rows[j])]);
        }
      ASSERT_GT(m.weights[k], 0.0);  // every rank trains something at every depth here
      if (k == 2) weights += m.weights[k];
    }
  }
  EXPECT_DOUBLE_EQ(weights, 1.0);  // depth 3: 5 trained targets a sample, split unevenly over the ranks
}

TEST(MtpBatch, ARankWithNothingToTrainHasWeightZeroAndAFiniteTarget) {
  // T = 4 over C = 2: rank 1 holds positions 1 and 2; at depth 3 only position 0 trains.
  const Tensor tokens = tokens_of({1, 2, 3, 4, 5}, 1);
  const memory::MtpInputs m = mtp_inputs(tokens, Tensor(), 3, 2, 1, Device::cpu());
  EXPECT_EQ(m.weights[2], 0.0);
  EXPECT_EQ(m.targets[2].to_vector<int64_t>()[0], 0);
  EXPECT_EQ(mtp_inputs(tokens, Tensor(), 3, 2, 0, Device::cpu()).weights[2], 1.0);
}

}  // namespace
}  // namespace tidal::train
