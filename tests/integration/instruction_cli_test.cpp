// Instruction data as a user runs it (issue 31): `tidal prepare --handler-name ... --prompt-type ...` on JSON
// Lines, the three files read back, --pack, the errors, then `tidal train --is-instruction-dataset` on them.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/integration/run_command.h"
#include "tidal/data/indexed_dataset.h"
#include "tidal/data/instruction_sample.h"
#include "tidal/data/tokenizer.h"

namespace {

using Result = tidal::testing::CommandResult;
Result run(const std::string& cmd) { return tidal::testing::run_command("OMP_WAIT_POLICY=passive " + cmd); }

const std::string kTidal = TIDAL_BINARY_DIR "/tidal";

class InstructionCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(TIDAL_BINARY_DIR) + "/test_scratch/instruction_cli";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    write(dir_ + "/corpus.txt", "the user asks and the assistant answers\nWhat is two plus two? Four. Blue.\n");
    const Result r =
        run(kTidal + " tokenizer train --input " + dir_ + "/corpus.txt --vocab-size 300 " +
            "--min-frequency 1 --special-tokens '<|endoftext|>,<|im_start|>,<|im_end|>' --output " + tok());
    ASSERT_EQ(r.code, 0) << r.output;
    std::string alpaca;
    for (int i = 0; i < 12; ++i)
      alpaca += "{\"instruction\": \"What is " + std::to_string(i) + " plus two?\", \"input\": \"\", \"output\": \"" +
                std::to_string(i + 2) + ".\"}\n";
    write(dir_ + "/alpaca.jsonl", alpaca);
    write(dir_ + "/sharegpt.jsonl",
          "{\"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}, {\"from\": \"gpt\", \"value\": \"hello\"}, "
          "{\"from\": \"human\", \"value\": \"two plus two?\"}, {\"from\": \"gpt\", \"value\": \"Four.\"}]}\n");
  }
  static void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
  std::string tok() const { return dir_ + "/tok.json"; }
  std::string prepare(const std::string& input, const std::string& handler, const std::string& more) const {
    return kTidal + " prepare --input " + dir_ + "/" + input + " --tokenizer " + tok() + " --handler-name " + handler +
           " --prompt-type qwen --output-prefix " + dir_ + "/out " + more;
  }
  std::string dir_;
};

TEST_F(InstructionCli, PrepareWritesMindSpeedsThreeDatasets) {
  Result r = run(prepare("sharegpt.jsonl", "SharegptStyleInstructionHandler", "--append-eod"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("1 samples"), std::string::npos) << r.output;
  const tidal::data::Tokenizer t = tidal::data::Tokenizer::load(tok());
  const tidal::data::IndexedDataset ids(dir_ + "/out_packed_input_ids_document"),
      labels(dir_ + "/out_packed_labels_document"), mask(dir_ + "/out_packed_attention_mask_document");
  EXPECT_EQ(labels.dtype(), tidal::data::TokenDType::i32);
  const auto p1 = t.encode(
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
      "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  const auto r1 = t.encode("hello<|im_end|>\n");
  const auto p2 = t.encode("<|im_start|>user\ntwo plus two?<|im_end|>\n<|im_start|>assistant\n");
  const auto r2 = t.encode("Four.<|im_end|>\n");
  std::vector<int64_t> want_ids, want_labels;
  for (const auto* part : {&p1, &r1, &p2, &r2}) {
    want_ids.insert(want_ids.end(), part->begin(), part->end());
    const bool trained = part == &r1 || part == &r2;
    for (int64_t id : *part) want_labels.push_back(trained ? id : tidal::data::kIgnoreIndex);
  }
  want_ids.push_back(t.eod_id());
  want_labels.push_back(t.eod_id());
  EXPECT_EQ(ids.document(0), want_ids);
  EXPECT_EQ(labels.document(0), want_labels);
  EXPECT_EQ(mask.document(0), std::vector<int64_t>(want_ids.size(), 1));
}

TEST_F(InstructionCli, PackAndErrors) {
  Result r = run(prepare("alpaca.jsonl", "AlpacaStyleInstructionHandler", "--pack --seq-length 256"));
  ASSERT_EQ(r.code, 0) << r.output;
  const tidal::data::IndexedDataset packed(dir_ + "/out_packed_input_ids_document");
  EXPECT_LT(packed.num_documents(), 12);  // several samples per pack
  for (int64_t d = 0; d < packed.num_documents(); ++d) EXPECT_EQ(packed.document(d).size(), 256u);
  r = run(prepare("alpaca.jsonl", "AlpacaStyleInstructionHandler", "--pack --seq-length 40"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: 12 samples longer than 39 tokens truncated"), std::string::npos) << r.output;

  // --neat-pack: the attention mask numbers each pack's samples 1, 2, ... (each a whole sample) and its padding 0.
  r = run(prepare("alpaca.jsonl", "AlpacaStyleInstructionHandler", "--pack --neat-pack --seq-length 256"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("neat sequences of 256 tokens"), std::string::npos) << r.output;
  const tidal::data::IndexedDataset neat_ids(dir_ + "/out_packed_input_ids_document"),
      neat_mask(dir_ + "/out_packed_attention_mask_document");
  int64_t samples = 0;
  for (int64_t d = 0; d < neat_mask.num_documents(); ++d) {
    const std::vector<int64_t> m = neat_mask.document(d), ids = neat_ids.document(d);
    ASSERT_EQ(m.size(), 256u);
    EXPECT_EQ(m.front(), 1);
    EXPECT_EQ(m.back(), 0);  // at least one pad: a pack holds at most 255 tokens
    for (size_t i = 1; i < m.size(); ++i) {
      EXPECT_TRUE(m[i] == m[i - 1] || m[i] == m[i - 1] + 1 || m[i] == 0) << d << " " << i;
      // Every sample opens with Qwen's system header: its first token is <|im_start|>.
      if (m[i] != m[i - 1] && m[i] != 0) {
        EXPECT_EQ(ids[i], ids[0]) << d << " " << i;
      }
    }
    samples += *std::max_element(m.begin(), m.end());
  }
  EXPECT_EQ(samples, 12);
  r = run(prepare("alpaca.jsonl", "AlpacaStyleInstructionHandler", "--neat-pack --seq-length 256"));
  EXPECT_NE(r.output.find("--neat-pack needs --pack"), std::string::npos) << r.output;

  r = run(kTidal + " prepare --input " + dir_ + "/alpaca.jsonl --tokenizer " + tok() +
          " --handler-name AlpacaStyleInstructionHandler --prompt-type llama2 --output-prefix " + dir_ + "/x");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("unknown --prompt-type 'llama2'"), std::string::npos) << r.output;
  r = run(prepare("sharegpt.jsonl", "AlpacaStyleInstructionHandler", ""));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("sharegpt.jsonl:1: no key 'instruction'"), std::string::npos) << r.output;
  r = run(prepare("alpaca.jsonl", "AlpacaStyleInstructionHandler", "--pack"));
  EXPECT_NE(r.output.find("--pack needs --seq-length"), std::string::npos) << r.output;
  r = run(kTidal + " prepare --input " + dir_ + "/alpaca.jsonl --tokenizer " + tok() + " --output-prefix " + dir_ +
          "/x --prompt-type qwen");
  EXPECT_NE(r.output.find("--prompt-type is for instruction data"), std::string::npos) << r.output;
}

TEST_F(InstructionCli, ToolTurnsAndTemplateFiles) {
  // A ShareGPT record with a tool call, its observation and the tools column (--map-keys names it).
  write(dir_ + "/tools.jsonl",
        R"({"conversations": [{"from": "human", "value": "two plus two?"}, )"
        R"({"from": "function_call", "value": "{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 2}}"}, )"
        R"({"from": "observation", "value": "4"}, {"from": "gpt", "value": "Four."}], )"
        R"("tools": "[{\"name\": \"add\", \"parameters\": {\"properties\": {\"a\": {\"type\": \"integer\"}}}}]"})"
        "\n");
  const std::string tools = "--map-keys '{\"tools\": \"tools\"}'";
  Result r = run(prepare("tools.jsonl", "SharegptStyleInstructionHandler", tools));
  ASSERT_EQ(r.code, 0) << r.output;
  const tidal::data::Tokenizer t = tidal::data::Tokenizer::load(tok());
  const std::vector<int64_t> builtin = tidal::data::IndexedDataset(dir_ + "/out_packed_input_ids_document").document(0),
                             builtin_labels =
                                 tidal::data::IndexedDataset(dir_ + "/out_packed_labels_document").document(0);
  // The call is trained (as a reply), the observation is not.
  const std::string call =
      "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 2}}\n</tool_call><|im_end|>\n";
  std::vector<int64_t> trained;
  for (int64_t l : builtin_labels)
    if (l != tidal::data::kIgnoreIndex) trained.push_back(l);
  std::vector<int64_t> want = t.encode(call);
  for (int64_t id : t.encode("Four.<|im_end|>\n")) want.push_back(id);
  EXPECT_EQ(trained, want) << t.decode(trained);
  // --prompt-type-path: a file writing Qwen2.5's template (tests/fixtures/chat/builtin_templates.json) prepares
  // the same text; the trained tokens are the same.
  const std::string file = std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/chat/builtin_templates.json";
  r = run(prepare("tools.jsonl", "SharegptStyleInstructionHandler", tools + " --prompt-type-path " + file));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("--prompt-type qwen of " + file), std::string::npos) << r.output;
  const std::vector<int64_t> from_file =
      tidal::data::IndexedDataset(dir_ + "/out_packed_input_ids_document").document(0);
  EXPECT_EQ(t.decode(from_file), t.decode(builtin));
  // A template without a tool format refuses the record by line; --on-bad-line skip counts it.
  r = run(kTidal + " prepare --input " + dir_ + "/tools.jsonl --tokenizer " + tok() +
          " --handler-name SharegptStyleInstructionHandler --prompt-type empty --output-prefix " + dir_ + "/x " +
          tools);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("tools.jsonl:1: [chat] --prompt-type empty has no tool format"), std::string::npos)
      << r.output;
  // Errors of --prompt-type-path name the file.
  r = run(prepare("alpaca.jsonl", "AlpacaStyleInstructionHandler", "--prompt-type-path " + dir_ + "/none.json"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("none.json is not a file"), std::string::npos) << r.output;
  r = run(kTidal + " prepare --input " + dir_ + "/alpaca.jsonl --tokenizer " + tok() +
          " --handler-name AlpacaStyleInstructionHandler --prompt-type llama3 --prompt-type-path " + file +
          " --output-prefix " + dir_ + "/x");
  EXPECT_NE(r.output.find("--prompt-type 'llama3' is not a template of " + file +
                          " (it has qwen, chatml, alpaca, empty, deepseek3)"),
            std::string::npos)
      << r.output;
}

TEST_F(InstructionCli, TrainOnInstructionData) {
  ASSERT_EQ(run(prepare("alpaca.jsonl", "AlpacaStyleInstructionHandler", "--append-eod")).code, 0);
  const std::string train = kTidal + " train --model tiny-llama --data-path " + dir_ + "/out --tokenizer " + tok() +
                            " --is-instruction-dataset --micro-batch-size 2 --train-iters 3 --no-progress " +
                            "--sample-tokens 0 --eval-interval 3 --eval-iters 1 --split 80,20,0 ";
  Result r = run(train + "--seq-length 128");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("instruction data: 12 records"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("iteration        3/       3"), std::string::npos) << r.output;
  r = run(train + "--seq-length 256 --variable-seq-lengths");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run(kTidal + " train --model tiny-llama --data-path " + dir_ + "/nothing --tokenizer " + tok() +
          " --is-instruction-dataset --train-iters 1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("nothing_packed_input_ids_document.idx/.bin do not exist"), std::string::npos) << r.output;
  r = run(kTidal + " train --model tiny-llama --mock-data --variable-seq-lengths --train-iters 1");
  EXPECT_NE(r.output.find("--variable-seq-lengths is for instruction data"), std::string::npos) << r.output;
}

}  // namespace
