// optim::make_shard_layout: the distributed optimizer's split of the parameters over ranks.
#include "tidal/optim/shard_layout.h"

#include <gtest/gtest.h>

namespace tidal::optim {
namespace {

void expect_valid(const ShardLayout& l, const std::vector<int64_t>& numels, int ranks, int64_t align) {
  ASSERT_EQ(l.ranks(), ranks);
  EXPECT_EQ(l.bounds.front(), 0);
  EXPECT_EQ(l.bounds.back(), l.total());
  int64_t covered = 0;
  for (int r = 0; r < ranks; ++r) {
    ASSERT_LE(l.bounds[size_t(r)], l.bounds[size_t(r) + 1]);
    // Within one aligned chunk (or one parameter's tail) of the even share.
    EXPECT_LE(std::abs(l.shard_size(r) - l.total() / ranks), 2 * align) << "rank " << r;
    for (const ShardLayout::Fragment& f : l.fragments(r)) {
      EXPECT_EQ(f.begin % align, 0) << "a cut inside parameter " << f.param << " is not aligned";
      EXPECT_LE(f.begin + f.length, numels[f.param]);
      covered += f.length;
    }
  }
  EXPECT_EQ(covered, l.total());
}

TEST(ShardLayout, CutsFallOnAlignedElementsAndCoverEverythingOnce) {
  const std::vector<int64_t> numels = {1000, 37, 4096, 5, 0, 2500, 64};
  for (int ranks : {1, 2, 3, 4, 7}) expect_valid(make_shard_layout(numels, ranks, 16), numels, ranks, 16);
}

TEST(ShardLayout, OneRankOwnsEverythingAndTinyModelsLeaveSomeRanksEmpty) {
  ShardLayout one = make_shard_layout({10, 20}, 1, 16);
  EXPECT_EQ(one.shard_size(0), 30);
  ASSERT_EQ(one.fragments(0).size(), 2u);
  EXPECT_EQ(one.fragments(0)[1].length, 20);
  // 3 ranks over 20 elements cut at multiples of 16 (targets 7 and 14 both round up to 16): rank 1
  // owns nothing.
  ShardLayout small = make_shard_layout({20}, 3, 16);
  expect_valid(small, {20}, 3, 16);
  EXPECT_EQ(small.bounds, (std::vector<int64_t>{0, 16, 16, 20}));
  EXPECT_TRUE(small.fragments(1).empty());
}

}  // namespace
}  // namespace tidal::optim
