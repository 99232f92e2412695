// JSON Lines reading (data/jsonl.h): lines longer than the read buffer, CRLF endings, a last line without
// its newline, blank lines counted, the record's values in --json-keys order, bad lines under each policy.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/support/error_of.h"
#include "tidal/data/jsonl.h"

namespace tidal::data {
namespace {

std::string write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(JsonLines, LongLinesCrlfAndTheLastLineWithoutItsNewline) {
  const std::string big(300000, 'x');  // longer than a 64 KiB read
  const std::string path =
      write("tidal_jsonl_a.jsonl", "{\"a\": \"" + big + "\", \"b\": \"one\"}\r\n  \n{\"b\": \"two\", " +
                                       "\"a\": \"\\u00e9t\\u00e9\"}\n{\"a\": \"3\", \"b\": \"three\"}");
  std::vector<std::vector<std::string>> got;
  JsonlCounts counts;
  for_each_json_record(path, {"b", "a"}, BadLine::fail, counts,
                       [&](std::vector<std::string>&& v) { got.push_back(std::move(v)); });
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], (std::vector<std::string>{"one", big}));
  EXPECT_EQ(got[1], (std::vector<std::string>{"two", "\xc3\xa9t\xc3\xa9"}));  // escapes decoded to UTF-8
  EXPECT_EQ(got[2], (std::vector<std::string>{"three", "3"}));
  EXPECT_EQ(counts.records, 3);
  EXPECT_EQ(counts.blank, 1);
  EXPECT_EQ(counts.bad, 0);
}

TEST(JsonLines, BadLinesStopOrAreCounted) {
  const std::string path = write("tidal_jsonl_b.jsonl", "[1, 2]\n{\"text\": null}\n{\"text\": \"ok\"}\n{\"tex\n");
  JsonlCounts counts;
  const std::string e = testing::error_of(
      [&] { for_each_json_record(path, {"text"}, BadLine::fail, counts, [](std::vector<std::string>&&) {}); });
  EXPECT_NE(e.find("tidal_jsonl_b.jsonl:1: a JSON array, not an object"), std::string::npos) << e;
  JsonlCounts skipped;
  int64_t seen = 0;
  for_each_json_record(path, {"text"}, BadLine::skip, skipped, [&](std::vector<std::string>&&) { ++seen; });
  EXPECT_EQ(seen, 1);
  EXPECT_EQ(skipped.bad, 3);
  EXPECT_NE(skipped.first_bad.find(":1: a JSON array"), std::string::npos) << skipped.first_bad;
  EXPECT_NE(testing::error_of([&] {
              JsonlCounts c;
              for_each_json_record(::testing::TempDir() + "missing.jsonl", {"text"}, BadLine::fail, c,
                                   [](std::vector<std::string>&&) {});
            }).find("is not a readable regular file"),
            std::string::npos);
  EXPECT_TRUE(is_json_lines("x.jsonl") && is_json_lines("x.json") && is_json_lines("x.jsonl.gz"));
  EXPECT_FALSE(is_json_lines("x.txt") || is_json_lines("jsonl"));
}

}  // namespace
}  // namespace tidal::data
