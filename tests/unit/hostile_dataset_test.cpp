// A Megatron .idx/.bin pair from strangers: every count, size and pointer is checked against the files'
// real lengths before anything is allocated or read, and the numbers a loader computes from them
// cannot overflow.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "tests/support/error_of.h"
#include "tests/unit/data_test_util.h"
#include "tidal/data/gpt_dataset.h"
#include "tidal/data/indexed_dataset.h"

namespace tidal::data {
namespace {

using tidal::testing::error_of;

#define EXPECT_HAS(msg, fragment) EXPECT_NE((msg).find(fragment), std::string::npos) << (msg)

// Two documents, [1, 2, 3] and [4, 5, 6, 7], written by tidal's writer in `dtype`.
std::string write_pair(const std::string& name, TokenDType dtype = TokenDType::u16) {
  const std::string prefix = testing::scratch_dir("hostile_dataset_" + name) + "/d";
  IndexedDatasetWriter w(prefix, dtype);
  w.add_document({1, 2, 3});
  w.add_document({4, 5, 6, 7});
  w.finish();
  return prefix;
}

// Overwrites bytes of PREFIX.idx at `at` with the little-endian `v`.
template <typename T>
void patch_idx(const std::string& prefix, size_t at, T v) {
  std::string idx = testing::read_file(prefix + ".idx");
  std::memcpy(idx.data() + at, &v, sizeof v);
  testing::write_file(prefix + ".idx", idx);
}

constexpr size_t kCounts = 18;  // u64 sequence count, then u64 document count
constexpr size_t kSizes = 34;   // int32 sizes, then int64 pointers, then int64 document index

TEST(HostileDataset, HugeCountsAreTruncationNotAllocation) {
  const std::string prefix = write_pair("counts");
  patch_idx<uint64_t>(prefix, kCounts, uint64_t(1) << 63);  // 12 * n overflowed
  const std::string msg = error_of([&] { IndexedDataset d(prefix); });
  EXPECT_HAS(msg, "[indexed dataset] '" + prefix + ".idx': truncated: 9223372036854775808 sequences");
  patch_idx<uint64_t>(prefix, kCounts, 2);
  patch_idx<uint64_t>(prefix, kCounts + 8, ~uint64_t(0));
  EXPECT_HAS(error_of([&] { IndexedDataset d(prefix); }), "truncated: 2 sequences and 18446744073709551615 document");
}

TEST(HostileDataset, SizesAndPointersAreCheckedAgainstEachOtherAndTheBin) {
  std::string prefix = write_pair("sizes");
  patch_idx<int32_t>(prefix, kSizes, -3);
  EXPECT_HAS(error_of([&] { IndexedDataset d(prefix); }), "'" + prefix + ".idx': sequence 0 has a negative size -3");
  prefix = write_pair("sizes_big");
  patch_idx<int32_t>(prefix, kSizes + 4, std::numeric_limits<int32_t>::max());  // the last sequence: 4 GiB of u16
  EXPECT_HAS(error_of([&] { IndexedDataset d(prefix); }),
             "'" + prefix + ".bin' has 14 bytes but '" + prefix + ".idx' describes 2147483650 uint16 tokens");
  prefix = write_pair("pointers");
  patch_idx<int64_t>(prefix, kSizes + 8 + 8, -6);  // the second pointer goes back
  EXPECT_HAS(error_of([&] { IndexedDataset d(prefix); }),
             "sequence 1 starts at byte -6 but the sizes before it put it");
  prefix = write_pair("doc_idx");
  patch_idx<int64_t>(prefix, kSizes + 8 + 16 + 16, 0);  // document index 2 goes back to 0
  EXPECT_HAS(error_of([&] { IndexedDataset d(prefix); }), "document index 2 is 0: not within [1, 2]");
}

TEST(HostileDataset, PathsThatAreNotFilesAreClearErrors) {
  const std::string dir = testing::scratch_dir("hostile_dataset_dirs");
  std::filesystem::create_directories(dir + "/d.idx");
  EXPECT_HAS(error_of([&] { IndexedDataset d(dir + "/d"); }), "'" + dir + "/d.idx' is not a file");
  const std::string prefix = write_pair("bin_dir");
  std::filesystem::remove(prefix + ".bin");
  std::filesystem::create_directories(prefix + ".bin");
  EXPECT_HAS(error_of([&] { IndexedDataset d(prefix); }), "'" + prefix + ".bin' is not a regular file");
}

TEST(HostileDataset, FloatTokensOutsideInt64BecomeOutOfRangeIds) {
  const std::string prefix = write_pair("floats", TokenDType::f32);
  std::string bin = testing::read_file(prefix + ".bin");
  const float bad[3] = {std::nanf(""), 1e30f, -5.0f};
  std::memcpy(bin.data(), bad, sizeof bad);
  testing::write_file(prefix + ".bin", bin);
  IndexedDataset d(prefix);
  EXPECT_EQ(d.sequence(0), (std::vector<int64_t>{-1, -1, -1}));  // the embedding refuses -1 by name
  EXPECT_EQ(d.sequence(1), (std::vector<int64_t>{4, 5, 6, 7}));
}

TEST(HostileDataset, RangesAndPositionsCannotOverflow) {
  auto d = std::make_shared<IndexedDataset>(write_pair("ranges"));
  std::vector<int64_t> out(2);
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_HAS(error_of([&] { d->read_tokens(max, 2, out.data()); }), "are out of range [0, 7)");
  EXPECT_HAS(error_of([&] { d->read_tokens(3, max, out.data()); }), "are out of range [0, 7)");
  auto train = std::make_shared<GPTDataset>(d, DocumentRange{0, 2}, 2, 1);
  DataLoader loader(train, max - 1);
  EXPECT_HAS(error_of([&] { loader.next(4); }), "[data] loader position 9223372036854775806 cannot advance by 4");
  MockDataset mock(100, 4, 1);
  std::vector<int64_t> tokens(5);
  mock.sample(max, tokens.data());  // the counter wraps as an unsigned hash input, not as signed overflow
  for (int64_t t : tokens) EXPECT_TRUE(t >= 0 && t < 100) << t;
}

}  // namespace
}  // namespace tidal::data
