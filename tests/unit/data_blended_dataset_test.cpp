// Megatron's weighted blend (data/blended_dataset.h): its build_blending_indices order, each dataset's own
// stream behind it, the draws the log reports, and the --data-path forms that give it.
#include "tidal/data/blended_dataset.h"

#include <gtest/gtest.h>

#include "tests/support/error_of.h"
#include "tidal/train/arguments.h"

namespace tidal::data {
namespace {

std::shared_ptr<const TokenDataset> mock(uint64_t seed) { return std::make_shared<MockDataset>(100, 8, seed); }

TEST(DataBlend, MegatronsOrder) {
  // weights 0.3 / 0.7 (given as 3 and 7): at each sample the dataset lagging weight x max(n, 1) the most.
  BlendedDataset b({mock(1), mock(2)}, {3, 7}, {"A", "B"});
  const std::vector<int> want = {1, 0, 1, 1, 0, 1, 1, 0, 1, 1};  // B A B B A B B A B B
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(b.source(i).first, want[size_t(i)]) << i;
  EXPECT_EQ(b.draws(10), (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(b.describe_draws(10), "A 3 (30.0%), B 7 (70.0%)");
  // Long runs keep the shares to within one sample.
  const std::vector<int64_t> d = b.draws(100000);
  EXPECT_NEAR(double(d[0]), 30000.0, 1.0);
  EXPECT_EQ(d[0] + d[1], 100000);
}

TEST(DataBlend, EachSampleIsItsDatasetsNextOne) {
  const auto a = mock(1), c = mock(2), e = mock(3);
  BlendedDataset b({a, c, e}, {0.2, 0.5, 0.3}, {"a", "c", "e"});
  std::vector<int64_t> next(3, 0);
  std::vector<int64_t> got(9), want(9);
  for (int64_t i = 0; i < 200; ++i) {
    const auto [d, j] = b.source(i);
    EXPECT_EQ(j, next[size_t(d)]++) << i;
    b.sample(i, got.data());
    (d == 0 ? a : d == 1 ? c : e)->sample(j, want.data());
    EXPECT_EQ(got, want) << i;
  }
  // Asked out of order (a resumed loader), the same sources.
  BlendedDataset again({a, c, e}, {0.2, 0.5, 0.3}, {"a", "c", "e"});
  EXPECT_EQ(again.source(150), b.source(150));
  EXPECT_EQ(again.source(3), b.source(3));
}

TEST(DataBlend, RefusesWhatCannotBlend) {
  EXPECT_NE(testing::error_of([] {
              BlendedDataset({mock(1), mock(2)}, {1, 0}, {"A", "B"});
            }).find("the weight of B must be a positive number"),
            std::string::npos);
  const auto long_seq = std::make_shared<MockDataset>(100, 16, 1);
  EXPECT_NE(testing::error_of([&] {
              BlendedDataset({mock(1), long_seq}, {1, 1}, {"A", "B"});
            }).find("differ in sequence length"),
            std::string::npos);
}

TEST(DataBlend, DataPathForms) {
  using train::parse_train_args;
  const std::vector<std::string> base = {"--tokenizer", "t.json", "--data-path"};
  auto with = [&](std::vector<std::string> v) {
    std::vector<std::string> a = base;
    a.insert(a.end(), v.begin(), v.end());
    return a;
  };
  train::TrainArgs a = parse_train_args(with({"0.3", "A", "0.7", "B"}));
  EXPECT_EQ(a.data_path, (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(a.data_weights, (std::vector<double>{0.3, 0.7}));
  a = parse_train_args(with({"A", "B", "C"}));
  EXPECT_EQ(a.data_path.size(), size_t(3));
  EXPECT_TRUE(a.data_weights.empty());  // by size
  a = parse_train_args(with({"A"}));
  EXPECT_EQ(a.data_path, (std::vector<std::string>{"A"}));
  const auto msg = [&](std::vector<std::string> v) { return testing::error_of([&] { parse_train_args(with(v)); }); };
  EXPECT_NE(msg({"0.3", "A", "0.7"}).find("takes pairs"), std::string::npos);
  EXPECT_NE(msg({"0.3", "A", "B", "C"}).find("must be a positive number"), std::string::npos);
  EXPECT_NE(msg({"A", "0.5", "B"}).find("mixes prefixes and weights"), std::string::npos);
  EXPECT_NE(msg({"-1", "A", "1", "B"}).find("must be a positive number"), std::string::npos);
}

}  // namespace
}  // namespace tidal::data
