// Training samples: Megatron's --split, sample layout, per-epoch shuffles, resumable loaders, mock data.
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "tests/unit/data_test_util.h"
#include "tidal/base/error.h"
#include "tidal/data/gpt_dataset.h"

namespace tidal::data {
namespace {

using Ids = std::vector<int64_t>;

// Documents of the given sizes whose tokens are their global positions 0, 1, 2, ... (so a sample's
// first token says where it starts).
std::shared_ptr<const IndexedDataset> counting_dataset(const std::string& name, const std::vector<int64_t>& sizes) {
  const std::string prefix = testing::scratch_dir(name) + "/d";
  IndexedDatasetWriter w(prefix, TokenDType::i32);
  int64_t next = 0;
  for (int64_t n : sizes) {
    Ids doc(static_cast<size_t>(n));
    std::iota(doc.begin(), doc.end(), next);
    next += n;
    w.add_document(doc);
  }
  w.finish();
  return std::make_shared<const IndexedDataset>(prefix);
}

TEST(DataSplit, MegatronRanges) {
  auto r = split_documents("98,2", 100);
  EXPECT_EQ(r[0].begin, 0);
  EXPECT_EQ(r[0].end, 98);
  EXPECT_EQ(r[1].begin, 98);
  EXPECT_EQ(r[1].end, 100);
  EXPECT_EQ(r[2].size(), 0);
  r = split_documents("969, 30, 1", 1000);
  EXPECT_EQ(r[0].size(), 969);
  EXPECT_EQ(r[1].size(), 30);
  EXPECT_EQ(r[2].size(), 1);
  EXPECT_EQ(r[2].end, 1000);
  // Python's round(1.5) == 2 (half to even): indices [0, 2, 4, 4], then all but the first shift back
  // by the excess 1, as _get_split_indices does: [0, 1, 3, 3].
  r = split_documents("1,1", 3);
  EXPECT_EQ(r[0].size(), 1);
  EXPECT_EQ(r[1].size(), 2);
  EXPECT_THROW(split_documents("", 10), Error);
  EXPECT_THROW(split_documents("0,0,0", 10), Error);
  EXPECT_THROW(split_documents("1,2,3,4", 10), Error);
}

TEST(DataGPTDataset, SamplesOverlapByOneTokenAndEpochsArePermutations) {
  const auto data = counting_dataset("gpt_epochs", {10, 7, 20, 3});  // 40 tokens
  const GPTDataset ds(data, {0, 4}, /*seq_length=*/6, /*seed=*/1234);
  EXPECT_EQ(ds.num_tokens(), 40);
  EXPECT_EQ(ds.samples_per_epoch(), (40 - 1) / 6);  // 6 samples
  std::vector<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> order;
    for (int64_t j = 0; j < 6; ++j) {
      const Sample s = ds.get(epoch * 6 + j);
      ASSERT_EQ(s.tokens.size(), 7u);
      EXPECT_EQ(s.epoch, epoch);
      for (size_t t = 0; t < 7; ++t) EXPECT_EQ(s.tokens[t], s.index * 6 + int64_t(t));  // crosses documents
      order.push_back(s.index);
    }
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (Ids{0, 1, 2, 3, 4, 5})) << "epoch " << epoch;
    orders.push_back(order);
  }
  EXPECT_TRUE(orders[0] != orders[1] || orders[1] != orders[2]) << "epochs should reshuffle";
  // Deterministic in the seed; another seed gives another order.
  const GPTDataset same(data, {0, 4}, 6, 1234), other(data, {0, 4}, 6, 99);
  bool differs = false;
  for (int64_t i = 0; i < 18; ++i) {
    EXPECT_EQ(same.get(i).tokens, ds.get(i).tokens);
    differs = differs || other.get(i).index != ds.get(i).index;
  }
  EXPECT_TRUE(differs);
}

TEST(DataGPTDataset, ShuffleIsABijection) {
  for (int64_t n : {1, 2, 3, 5, 64, 100, 1000, 4097}) {
    std::vector<int> seen(size_t(n), 0);
    for (int64_t i = 0; i < n; ++i) ++seen[size_t(shuffle_index(i, n, 7, 3))];
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), n) << "n = " << n;
  }
}

TEST(DataGPTDataset, SplitsReadOnlyTheirDocuments) {
  const auto data = counting_dataset("gpt_split", std::vector<int64_t>(10, 50));  // 10 documents of 50 tokens
  const auto train = GPTDataset::from_split(data, "8,2", 0, 16, 1);
  const auto valid = GPTDataset::from_split(data, "8,2", 1, 16, 1);
  EXPECT_EQ(train->documents().size(), 8);
  EXPECT_EQ(valid->documents().size(), 2);
  EXPECT_EQ(train->samples_per_epoch(), (400 - 1) / 16);
  EXPECT_EQ(valid->samples_per_epoch(), (100 - 1) / 16);
  for (int64_t i = 0; i < 50; ++i) {
    for (int64_t t : train->get(i).tokens) EXPECT_LT(t, 400);
    for (int64_t t : valid->get(i).tokens) EXPECT_GE(t, 400);
  }
}

TEST(DataGPTDataset, EmptyOrShortSplitsAreErrors) {
  const auto data = counting_dataset("gpt_errors", {5, 5, 5});
  try {
    GPTDataset::from_split(data, "100,0,0", 1, 4, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("split of '"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("is empty"), std::string::npos) << e.what();
  }
  try {
    GPTDataset(data, {0, 1}, 8, 1);  // 5 tokens, a sample needs 9
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than one sample of seq_length + 1 = 9"), std::string::npos) << e.what();
  }
  EXPECT_THROW(GPTDataset(data, {0, 4}, 2, 1), Error);  // past the last document
  EXPECT_THROW(GPTDataset(data, {0, 3}, 0, 1), Error);
  EXPECT_NO_THROW(GPTDataset(data, {0, 3}, 14, 1));  // exactly one sample: 15 tokens
}

TEST(DataLoader, BatchesAndResume) {
  const auto data = counting_dataset("gpt_loader", {100, 37, 64});
  auto ds = std::make_shared<GPTDataset>(data, DocumentRange{0, 3}, 8, 5);
  DataLoader a(ds);
  const Batch b0 = a.next(4);
  EXPECT_EQ(b0.tokens.shape(), (Shape{4, 9}));
  EXPECT_EQ(b0.tokens.dtype(), DType::i64);
  EXPECT_EQ(b0.first_sample, 0);
  const int64_t saved = a.position();
  EXPECT_EQ(saved, 4);
  const Batch b1 = a.next(4), b2 = a.next(30);  // runs into the next epoch (24 samples per epoch)
  DataLoader resumed(ds);
  resumed.set_position(saved);
  EXPECT_EQ(resumed.next(4).tokens.to_vector<int64_t>(), b1.tokens.to_vector<int64_t>());
  EXPECT_EQ(resumed.next(30).tokens.to_vector<int64_t>(), b2.tokens.to_vector<int64_t>());
  // Row r of a batch is stream sample first_sample + r.
  const std::vector<int64_t> rows = b2.tokens.to_vector<int64_t>();
  for (int64_t r = 0; r < 30; ++r)
    EXPECT_EQ(Ids(rows.begin() + r * 9, rows.begin() + (r + 1) * 9), ds->get(b2.first_sample + r).tokens);
  EXPECT_THROW(a.next(0), Error);
  EXPECT_THROW(a.set_position(-1), Error);
}

TEST(DataMock, DeterministicRandomIdsInRange) {
  auto mock = std::make_shared<MockDataset>(50, 32, 3);
  DataLoader a(mock), b(mock);
  const std::vector<int64_t> x = a.next(8).tokens.to_vector<int64_t>();
  EXPECT_EQ(x, b.next(8).tokens.to_vector<int64_t>());
  std::set<int64_t> values(x.begin(), x.end());
  EXPECT_GT(values.size(), 40u);  // 264 draws cover most of 50 ids
  for (int64_t v : x) {
    EXPECT_GE(v, 0);
    EXPECT_LT(v, 50);
  }
  EXPECT_NE(mock->get(0).tokens, mock->get(1).tokens);
  EXPECT_NE(mock->get(0).tokens, MockDataset(50, 32, 4).get(0).tokens);
  EXPECT_EQ(mock->get(123456789).tokens.size(), 33u);
  EXPECT_THROW(MockDataset(0, 8, 1), Error);
  EXPECT_THROW(MockDataset(10, 0, 1), Error);
}

}  // namespace
}  // namespace tidal::data
