// `tidal tokenizer` and `tidal prepare` as a user runs them: train, encode, decode, prepare, and the
// files they write read back with the library.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/integration/run_command.h"
#include "tidal/data/indexed_dataset.h"
#include "tidal/data/tokenizer.h"

namespace {

using Result = tidal::testing::CommandResult;
Result run(const std::string& cmd) { return tidal::testing::run_command(cmd); }

const std::string kTidal = TIDAL_BINARY_DIR "/tidal";

class DataCli : public ::testing::Test {
 protected:
  void SetUp() override {
    // The commands are dispatched by main.cpp; skip until they are.
    if (run(kTidal + " help").output.find("tokenizer") == std::string::npos)
      GTEST_SKIP() << "tidal has no tokenizer/prepare commands in this build";
    dir_ = std::string(TIDAL_BINARY_DIR) + "/test_scratch/data_cli";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    // A fortune(6)-style file: entries between lines holding only "%".
    write(dir_ + "/quotes",
          "The quick brown fox.\n%\nA second entry,\non two lines.\n%\n%\nThe end of the quick fox.\n");
    write(dir_ + "/more.txt", "Paragraph one is here.\n\n\nParagraph two, the quick one.\n");
  }
  static void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
  std::string dir_;
};

TEST_F(DataCli, TrainEncodeDecode) {
  const std::string tok = dir_ + "/tok.json";
  Result r = run(kTidal + " tokenizer train --input " + dir_ + "/quotes " + dir_ + "/more.txt --vocab-size 300 " +
                 "--min-frequency 1 --split-on-fortune-delimiter --output " + tok);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("300-token vocabulary"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bytes/token"), std::string::npos) << r.output;
  const tidal::data::Tokenizer t = tidal::data::Tokenizer::load(tok);
  EXPECT_EQ(t.vocab_size(), 300);

  r = run(kTidal + " tokenizer encode --tokenizer " + tok + " --text 'the quick fox<|endoftext|>'");
  ASSERT_EQ(r.code, 0) << r.output;
  std::string expected;
  for (int64_t id : t.encode("the quick fox<|endoftext|>")) {
    if (!expected.empty()) expected += ' ';
    expected += std::to_string(id);
  }
  EXPECT_EQ(r.output, expected + "\n");

  r = run(kTidal + " tokenizer decode --tokenizer " + tok + " --ids '" + expected + "'");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output, "the quick fox<|endoftext|>\n");

  r = run(kTidal + " tokenizer info --tokenizer " + tok);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("end of document: 299"), std::string::npos) << r.output;
}

TEST_F(DataCli, PrepareWritesOneDocumentPerEntry) {
  const std::string tok = dir_ + "/tok.json";
  ASSERT_EQ(run(kTidal + " tokenizer train --input " + dir_ + " --vocab-size 280 --output " + tok).code, 0);
  Result r = run(kTidal + " prepare --input " + dir_ + "/quotes --tokenizer " + tok + " --output-prefix " + dir_ +
                 "/q --split-on-fortune-delimiter --append-eod");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("3 documents"), std::string::npos) << r.output;
  const tidal::data::Tokenizer t = tidal::data::Tokenizer::load(tok);
  const tidal::data::IndexedDataset d(dir_ + "/q");
  ASSERT_EQ(d.num_documents(), 3);
  EXPECT_EQ(d.dtype(), tidal::data::TokenDType::u16);
  EXPECT_EQ(t.decode(d.document(1)), "A second entry,\non two lines.\n<|endoftext|>");
  EXPECT_EQ(t.decode(d.document(2)), "The end of the quick fox.\n<|endoftext|>");

  r = run(kTidal + " prepare --input " + dir_ + "/more.txt " + dir_ + "/quotes --tokenizer " + tok +
          " --output-prefix " + dir_ + "/p --split-on-blank-lines --dtype int32");
  ASSERT_EQ(r.code, 0) << r.output;
  const tidal::data::IndexedDataset p(dir_ + "/p");
  EXPECT_EQ(p.dtype(), tidal::data::TokenDType::i32);
  ASSERT_EQ(p.num_documents(), 3);  // two paragraphs, and the quotes file has no blank line
  EXPECT_EQ(t.decode(p.document(1)), "Paragraph two, the quick one.\n");

  r = run(kTidal + " prepare --input " + dir_ + "/more.txt --input " + dir_ + "/quotes --tokenizer " + tok +
          " --output-prefix " + dir_ + "/r --split-on-blank-lines --dtype int32");  // --input may repeat
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(tidal::data::IndexedDataset(dir_ + "/r").num_documents(), 3);

  r = run(kTidal + " prepare --input " + dir_ + "/more.txt --tokenizer " + tok + " --output-prefix " + dir_ + "/w");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(tidal::data::IndexedDataset(dir_ + "/w").num_documents(), 1);  // the whole file
  EXPECT_EQ(r.output.find("processed"), std::string::npos) << r.output;    // no progress lines unless asked

  // --log-interval N (Megatron's): a progress line every N documents (here after each batch).
  r = run(kTidal + " prepare --input " + dir_ + "/quotes --tokenizer " + tok + " --output-prefix " + dir_ +
          "/l --split-on-fortune-delimiter --log-interval 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("processed 3 documents ("), std::string::npos) << r.output;
}

// JSON Lines, as Megatron-LM's preprocess_data.py takes them: one dataset per --json-keys key, named
// PREFIX_KEY_document; gzip read the same; a malformed line stops the run naming FILE:LINE, or with
// --on-bad-line skip is skipped and counted; a truncated gzip stream is an error, not a short dataset.
TEST_F(DataCli, PrepareReadsJsonLines) {
  const std::string tok = dir_ + "/tok.json";
  ASSERT_EQ(run(kTidal + " tokenizer train --input " + dir_ + "/quotes --vocab-size 280 --output " + tok).code, 0);
  const tidal::data::Tokenizer t = tidal::data::Tokenizer::load(tok);
  write(dir_ + "/a.jsonl",
        "{\"text\": \"The quick fox.\", \"title\": \"One\"}\n\n{\"text\": \"A second\\nentry.\", "
        "\"title\": \"Two\"}\n{\"text\": 5, \"title\": \"x\"}\nnot json\n{\"text\": \"\", \"title\": "
        "\"Four\"}\n{\"text\": \"Last, no newline.\", \"title\": \"Five\"}");
  Result r =
      run(kTidal + " prepare --input " + dir_ + "/a.jsonl --tokenizer " + tok + " --output-prefix " + dir_ + "/j");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("a.jsonl:4: 'text' is a JSON number, not a string"), std::string::npos) << r.output;
  r = run(kTidal + " prepare --input " + dir_ + "/a.jsonl --tokenizer " + tok + " --output-prefix " + dir_ +
          "/j --on-bad-line skip --json-keys text title --append-eod");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("4 records, 2 malformed lines skipped (the first: " + dir_ + "/a.jsonl:4:"),
            std::string::npos)
      << r.output;
  const tidal::data::IndexedDataset text(dir_ + "/j_text_document"), title(dir_ + "/j_title_document");
  ASSERT_EQ(text.num_documents(), 3);  // the empty string is no document
  EXPECT_EQ(t.decode(text.document(1)), "A second\nentry.<|endoftext|>");
  EXPECT_EQ(t.decode(text.document(2)), "Last, no newline.<|endoftext|>");
  ASSERT_EQ(title.num_documents(), 4);
  EXPECT_EQ(t.decode(title.document(3)), "Five<|endoftext|>");
  // gzip: the same documents; cut short, an error.
  ASSERT_EQ(run("gzip -kf " + dir_ + "/a.jsonl").code, 0);
  r = run(kTidal + " prepare --input " + dir_ + "/a.jsonl.gz --tokenizer " + tok + " --output-prefix " + dir_ +
          "/g --on-bad-line skip");
  ASSERT_EQ(r.code, 0) << r.output;
  const tidal::data::IndexedDataset gz(dir_ + "/g_text_document");
  ASSERT_EQ(gz.num_documents(), 3);
  EXPECT_EQ(t.decode(gz.document(2)), "Last, no newline.");
  ASSERT_EQ(run("head -c 60 " + dir_ + "/a.jsonl.gz > " + dir_ + "/cut.jsonl.gz").code, 0);
  r = run(kTidal + " prepare --input " + dir_ + "/cut.jsonl.gz --tokenizer " + tok + " --output-prefix " + dir_ +
          "/c --on-bad-line skip");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("is not a whole gzip stream"), std::string::npos) << r.output;
  // Mistakes: a missing key, JSON flags on plain text, mixed inputs, a split flag.
  r = run(kTidal + " prepare --input " + dir_ + "/a.jsonl --tokenizer " + tok + " --output-prefix " + dir_ +
          "/m --json-keys body");
  EXPECT_NE(r.output.find("a.jsonl:1: no key 'body' (--json-keys)"), std::string::npos) << r.output;
  r = run(kTidal + " prepare --input " + dir_ + "/quotes --tokenizer " + tok + " --output-prefix " + dir_ +
          "/m --json-keys text");
  EXPECT_NE(r.output.find("--json-keys is for JSON Lines inputs"), std::string::npos) << r.output;
  r = run(kTidal + " prepare --input " + dir_ + "/quotes " + dir_ + "/a.jsonl --tokenizer " + tok +
          " --output-prefix " + dir_ + "/m");
  EXPECT_NE(r.output.find("the inputs mix JSON Lines (1 of 2 files) and plain text"), std::string::npos) << r.output;
  r = run(kTidal + " prepare --input " + dir_ + "/a.jsonl --tokenizer " + tok + " --output-prefix " + dir_ +
          "/m --split-on-blank-lines");
  EXPECT_NE(r.output.find("a JSON Lines record is one document of each key"), std::string::npos) << r.output;
}

TEST_F(DataCli, MistakesAreExplained) {
  Result r = run(kTidal + " tokenizer train --input " + dir_ + "/quotes --vocab-size 300");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("--output"), std::string::npos) << r.output;
  r = run(kTidal + " tokenizer frobnicate");
  EXPECT_EQ(r.code, 2);
  r = run(kTidal + " prepare --input " + dir_ + "/nope --tokenizer x.json --output-prefix y");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  r = run(kTidal + " tokenizer train --input --vocab-size 300 --output x.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("--input needs at least one value"), std::string::npos) << r.output;
  ASSERT_EQ(run(kTidal + " tokenizer train --input " + dir_ + " --vocab-size 260 --output " + dir_ + "/t.json").code,
            0);
  r = run(kTidal + " tokenizer decode --tokenizer " + dir_ + "/t.json --ids '1 two'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("must be integers"), std::string::npos) << r.output;
  r = run(kTidal + " tokenizer decode --tokenizer " + dir_ + "/t.json --ids '99999'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("99999"), std::string::npos) << r.output;
}

}  // namespace
