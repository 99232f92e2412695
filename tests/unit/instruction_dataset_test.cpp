// Instruction data for training (data/instruction_dataset.h): records padded or truncated to seq_length + 1
// with the pad id and label -100, --variable-seq-lengths batches, resume, and the files' checks.
#include <gtest/gtest.h>

#include <set>

#include "tests/support/error_of.h"
#include "tests/unit/data_test_util.h"
#include "tidal/data/instruction_dataset.h"

namespace tidal::data {
namespace {

constexpr int64_t M = -100;

// Records {1 2 3}, {4 5 6 7 8 9 10}: labels mask the first token of each.
std::string write_records(const std::string& name, TokenDType label_type = TokenDType::i32, bool same = true) {
  const std::string dir = testing::scratch_dir(name);
  IndexedDatasetWriter ids(dir + "/d_packed_input_ids_document", TokenDType::i32);
  IndexedDatasetWriter labels(dir + "/d_packed_labels_document", label_type);
  ids.add_document({1, 2, 3});
  ids.add_document({4, 5, 6, 7, 8, 9, 10});
  const int64_t m = label_type == TokenDType::u16 ? 0 : M;  // an unsigned file cannot hold -100
  labels.add_document({m, 2, 3});
  labels.add_document(same ? std::vector<int64_t>{m, 5, 6, 7, 8, 9, 10} : std::vector<int64_t>{m, 5});
  ids.finish();
  labels.finish();
  return dir + "/d";
}

std::vector<int64_t> row(const Tensor& t, int64_t r) {
  return std::vector<int64_t>(t.data<int64_t>() + r * t.size(1), t.data<int64_t>() + (r + 1) * t.size(1));
}

TEST(InstructionDataset, PadsAndTruncatesWithIgnoredLabels) {
  const InstructionFiles f = open_instruction_files(write_records("instr_ds_pad"));
  const InstructionDataset d(f, {0, 2}, /*seq_length=*/4, /*seed=*/1, /*pad_id=*/99);
  DataLoader loader(std::make_shared<InstructionDataset>(d));
  const Batch b = loader.next(2);  // one epoch: both records, in the epoch's order
  ASSERT_EQ(b.tokens.shape(), (Shape{2, 5}));
  ASSERT_EQ(b.labels.shape(), (Shape{2, 5}));
  std::set<std::vector<int64_t>> tokens, labels;
  for (int64_t r = 0; r < 2; ++r) {
    tokens.insert(row(b.tokens, r));
    labels.insert(row(b.labels, r));
  }
  EXPECT_EQ(tokens, (std::set<std::vector<int64_t>>{{1, 2, 3, 99, 99}, {4, 5, 6, 7, 8}}));
  EXPECT_EQ(labels, (std::set<std::vector<int64_t>>{{M, 2, 3, M, M}, {M, 5, 6, 7, 8}}));
  // Resume: the same samples from the same position.
  DataLoader again(std::make_shared<InstructionDataset>(d), 0);
  EXPECT_EQ(row(again.next(2).tokens, 1), row(b.tokens, 1));
}

TEST(InstructionDataset, VariableLengthsPadToTheLongestRounded) {
  const InstructionFiles f = open_instruction_files(write_records("instr_ds_var"));
  auto d = std::make_shared<InstructionDataset>(f, DocumentRange{0, 1}, /*seq_length=*/16, 1, /*pad_id=*/0);
  DataLoader short_only(d, 0, /*variable_multiple=*/2);
  const Batch b = short_only.next(1);  // 3 tokens: T = 2 rounded to 2
  EXPECT_EQ(row(b.tokens, 0), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(row(b.labels, 0), (std::vector<int64_t>{M, 2, 3}));
  auto both = std::make_shared<InstructionDataset>(f, DocumentRange{0, 2}, /*seq_length=*/16, 1, 0);
  DataLoader l(both, 0, /*variable_multiple=*/4);
  EXPECT_EQ(l.next(2).tokens.shape(), (Shape{2, 9}));  // longest 7 tokens: T = 6 rounded to 8
  DataLoader capped(std::make_shared<InstructionDataset>(f, DocumentRange{0, 2}, /*seq_length=*/5, 1, 0), 0, 32);
  EXPECT_EQ(capped.next(2).tokens.shape(), (Shape{2, 6}));  // never past seq_length
}

TEST(InstructionDataset, SplitsByRecord) {
  const InstructionFiles f = open_instruction_files(write_records("instr_ds_split"));
  EXPECT_EQ(InstructionDataset::from_split(f, "50,50", 0, 4, 1, 0)->samples_per_epoch(), 1);
  EXPECT_EQ(InstructionDataset::from_split(f, "50,50", 1, 4, 1, 0)->samples_per_epoch(), 1);
  EXPECT_NE(
      tidal::testing::error_of([&] { InstructionDataset::from_split(f, "100,0", 1, 4, 1, 0); }).find("has no record"),
      std::string::npos);
}

TEST(InstructionDataset, RefusesMismatchedOrMissingFiles) {
  EXPECT_NE(tidal::testing::error_of([] {
              open_instruction_files(write_records("instr_ds_u16", TokenDType::u16));
            }).find("labels need a signed integer type"),
            std::string::npos);
  EXPECT_NE(tidal::testing::error_of([] {
              open_instruction_files(write_records("instr_ds_len", TokenDType::i32, false));
            }).find("differ in record lengths"),
            std::string::npos);
  const std::string e = tidal::testing::error_of([] { open_instruction_files("/nonexistent/prefix"); });
  EXPECT_NE(e.find("/nonexistent/prefix_packed_input_ids_document.idx/.bin do not exist"), std::string::npos) << e;
}

}  // namespace
}  // namespace tidal::data
