// Input files and documents: fortune entries, blank-line paragraphs, directories.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "tests/unit/data_test_util.h"
#include "tidal/base/error.h"
#include "tidal/data/corpus.h"

namespace tidal::data {
namespace {

using V = std::vector<std::string_view>;

TEST(DataCorpus, SplitsFortuneEntriesAndParagraphs) {
  const std::string fortunes = "First.\n%\nSecond,\n  two lines.\n%\n%\n   \n%\nLast, no newline";
  EXPECT_EQ(split_text(fortunes, DocumentSplit::fortune),
            (V{"First.\n", "Second,\n  two lines.\n", "Last, no newline"}));
  const std::string paragraphs = "\n\nOne.\nStill one.\n\n \t\nTwo.\r\n\r\nThree.\n";
  EXPECT_EQ(split_text(paragraphs, DocumentSplit::blank_lines), (V{"One.\nStill one.\n", "Two.\r\n", "Three.\n"}));
  EXPECT_EQ(split_text(paragraphs, DocumentSplit::file), (V{paragraphs}));
  EXPECT_EQ(split_text(" \n\n", DocumentSplit::file), V{});  // nothing but whitespace: no document
  EXPECT_EQ(split_text("100%\n%", DocumentSplit::fortune), (V{"100%\n"}));
}

TEST(DataCorpus, DirectoriesGiveTheirTextFiles) {
  const std::string dir = testing::scratch_dir("corpus_dir");
  testing::write_file(dir + "/b", "bee\n");
  testing::write_file(dir + "/a", "ay\n");
  testing::write_file(dir + "/a.dat", std::string("\0\0\0\x02", 4));  // binary: skipped
  std::filesystem::create_symlink(dir + "/a", dir + "/a.u8");         // link: skipped
  EXPECT_EQ(expand_inputs({dir}), (std::vector<std::string>{dir + "/a", dir + "/b"}));
  EXPECT_EQ(expand_inputs({dir + "/b", dir + "/a.dat"}), (std::vector<std::string>{dir + "/b", dir + "/a.dat"}));
  EXPECT_THROW(expand_inputs({dir + "/missing"}), Error);
  EXPECT_THROW(expand_inputs({}), Error);
  std::vector<std::string> docs;
  for_each_document(expand_inputs({dir}), DocumentSplit::file, [&](std::string_view d) { docs.emplace_back(d); });
  EXPECT_EQ(docs, (std::vector<std::string>{"ay\n", "bee\n"}));
}

// A text input is read whole: one that may never end (a FIFO here; /dev/zero read until memory was gone) is
// refused by name before it is opened.
TEST(DataCorpus, AStreamIsRefusedNotReadForever) {
  const std::string fifo = testing::scratch_dir("corpus_fifo") + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    read_file(fifo);  // opening a FIFO without a writer would block here
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_file(testing::scratch_dir("corpus_fifo") + "/missing"), Error);  // still: cannot open
}

}  // namespace
}  // namespace tidal::data
