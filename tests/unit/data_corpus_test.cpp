// Input files and documents: fortune entries, blank-line paragraphs, directories.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tidal::data
