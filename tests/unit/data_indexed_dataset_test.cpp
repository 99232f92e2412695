// Megatron's MMapIndexedDataset: a byte-exact handmade index, write/read round trips in every dtype,
// and the errors a corrupted or mismatched pair of files gives.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/unit/data_test_util.h"
#include "tidal/base/error.h"
#include "tidal/data/indexed_dataset.h"

namespace tidal::data {
namespace {

using Ids = std::vector<int64_t>;

template <typename T>
void append(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// What megatron/core/datasets/indexed_dataset.py's IndexedDatasetBuilder writes for two documents,
// the first one sequence [1, 2, 3], the second two sequences [4, 5] and [6], dtype uint16:
std::string megatron_idx() {
  std::string s("MMIDIDX\0\0", 9);
  append<uint64_t>(s, 1);  // version
  append<uint8_t>(s, 8);   // uint16
  append<uint64_t>(s, 3);  // sequences
  append<uint64_t>(s, 3);  // len(document_indices) = documents + 1
  for (int32_t size : {3, 2, 1}) append<int32_t>(s, size);
  for (int64_t ptr : {0, 6, 10}) append<int64_t>(s, ptr);  // byte offsets: 3 * 2, then + 2 * 2
  for (int64_t d : {0, 1, 3}) append<int64_t>(s, d);
  return s;
}
std::string megatron_bin() {
  std::string s;
  for (uint16_t t : {1, 2, 3, 4, 5, 6}) append<uint16_t>(s, t);
  return s;
}

TEST(DataIndexedDataset, WriterMatchesMegatronByteForByte) {
  const std::string dir = testing::scratch_dir("idx_exact");
  IndexedDatasetWriter w(dir + "/d", TokenDType::u16);
  w.add_document({1, 2, 3});
  w.add_sequence(Ids{4, 5});
  w.add_sequence(Ids{6});
  w.end_document();
  EXPECT_EQ(w.num_documents(), 2);
  EXPECT_EQ(w.num_sequences(), 3);
  w.finish();
  EXPECT_EQ(testing::read_file(dir + "/d.idx"), megatron_idx());
  EXPECT_EQ(testing::read_file(dir + "/d.bin"), megatron_bin());
}

TEST(DataIndexedDataset, ReadsAHandmadeMegatronFile) {
  const std::string dir = testing::scratch_dir("idx_read");
  testing::write_file(dir + "/m.idx", megatron_idx());
  testing::write_file(dir + "/m.bin", megatron_bin());
  const IndexedDataset d(dir + "/m");
  EXPECT_EQ(d.dtype(), TokenDType::u16);
  EXPECT_EQ(d.num_sequences(), 3);
  EXPECT_EQ(d.num_documents(), 2);
  EXPECT_EQ(d.num_tokens(), 6);
  EXPECT_EQ(d.sequence(1), (Ids{4, 5}));
  EXPECT_EQ(d.sequence_offset(2), 5);
  EXPECT_EQ(d.document(0), (Ids{1, 2, 3}));
  EXPECT_EQ(d.document(1), (Ids{4, 5, 6}));
  EXPECT_EQ(d.document_token_offset(2), 6);
  Ids mid(4);
  d.read_tokens(1, 4, mid.data());  // across sequence and document boundaries
  EXPECT_EQ(mid, (Ids{2, 3, 4, 5}));
  EXPECT_THROW(d.sequence(3), Error);
  EXPECT_THROW(d.document(2), Error);
  EXPECT_THROW(d.read_tokens(5, 2, mid.data()), Error);
}

TEST(DataIndexedDataset, RoundTripEveryDtype) {
  const std::string dir = testing::scratch_dir("idx_dtypes");
  for (uint8_t code = 1; code <= 8; ++code) {
    const TokenDType dt = TokenDType(code);
    const int64_t top = dt == TokenDType::u8 ? 255 : dt == TokenDType::i8 ? 127 : 32767;
    const Ids a = {0, 1, top, 7}, b = {}, c = {top - 1};
    {
      IndexedDatasetWriter w(dir + "/x", dt);
      w.add_document(a);
      w.add_document(b);  // an empty document is allowed
      w.add_document(c);
      w.finish();
    }
    const IndexedDataset d(dir + "/x");
    EXPECT_EQ(d.dtype(), dt) << token_dtype_name(dt);
    EXPECT_EQ(d.num_documents(), 3);
    EXPECT_EQ(d.document(0), a) << token_dtype_name(dt);
    EXPECT_EQ(d.document(1), b);
    EXPECT_EQ(d.document(2), c);
    EXPECT_EQ(parse_token_dtype(token_dtype_name(dt)), dt);
  }
  EXPECT_EQ(optimal_token_dtype(50257), TokenDType::u16);
  EXPECT_EQ(optimal_token_dtype(151936), TokenDType::i32);
}

TEST(DataIndexedDataset, WriterRejectsTokensThatDoNotFit) {
  const std::string dir = testing::scratch_dir("idx_fit");
  {
    IndexedDatasetWriter w(dir + "/y", TokenDType::u16);
    EXPECT_THROW(w.add_sequence(Ids{70000}), Error);
    EXPECT_THROW(w.add_sequence(Ids{-1}), Error);
  }  // abandoned: no files left behind
  EXPECT_FALSE(std::filesystem::exists(dir + "/y.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/y.bin.tmp"));
  EXPECT_THROW(IndexedDatasetWriter("/nonexistent/dir/z", TokenDType::u16), Error);
  // A folder is not a prefix ("dir/" would write the hidden dir/.bin): an error naming it, nothing written.
  for (const std::string& folder : {dir + "/", dir}) {
    try {
      IndexedDatasetWriter w(folder, TokenDType::u16);
      FAIL() << "expected an error for " << folder;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("names a directory"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/.bin.tmp"));
  EXPECT_THROW(parse_token_dtype("uint7"), Error);
}

// Each corruption gives an error that names the file and what is wrong.
TEST(DataIndexedDataset, CorruptedFilesAreExplained) {
  const std::string dir = testing::scratch_dir("idx_bad");
  auto expect_error = [&](const std::string& idx, const std::string& bin, const std::string& what) {
    testing::write_file(dir + "/c.idx", idx);
    testing::write_file(dir + "/c.bin", bin);
    try {
      IndexedDataset d(dir + "/c");
      ADD_FAILURE() << "no error for: " << what;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(dir + "/c."), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << "expected '" << what << "' in: " << msg;
    }
  };
  const std::string idx = megatron_idx(), bin = megatron_bin();
  auto patched = [&](size_t at, const std::string& bytes) {
    std::string s = idx;
    s.replace(at, bytes.size(), bytes);
    return s;
  };
  expect_error(idx.substr(0, 20), bin, "truncated");
  expect_error(patched(0, std::string("TNTIDX\0\0\0", 9)), bin, "bad magic");
  expect_error(patched(9, std::string("\x02", 1)), bin, "version 2");
  expect_error(patched(17, std::string("\x09", 1)), bin, "unknown dtype code 9");
  expect_error(idx.substr(0, idx.size() - 8), bin, "truncated");
  expect_error(idx + std::string(5, '\0'), bin, "unexpected bytes");
  expect_error(idx, bin.substr(0, 10), "has 10 bytes but");
  expect_error(patched(17, std::string("\x04", 1)), bin, "starts at byte 6");  // int32: pointers disagree
  expect_error(patched(34 + 12 + 8, std::string("\x07", 1)), bin, "sizes and pointers disagree");  // pointer 6 -> 7
  expect_error(patched(34 + 12 + 24 + 8, std::string("\x05", 1)), bin, "document index 1 is 5");   // doc_idx past end
  testing::write_file(dir + "/only.idx", idx);
  EXPECT_THROW(IndexedDataset(dir + "/only"), Error);  // no .bin
  EXPECT_THROW(IndexedDataset(dir + "/missing"), Error);
}

}  // namespace
}  // namespace tidal::data
