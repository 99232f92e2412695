// Instruction samples (data/instruction_sample.h): a record through its handler, the chat template and the
// tokenizer into exact ids and labels (every non-assistant token -100, every reply of a multi-turn
// conversation trained), the tokenizer check, and MindSpeed's greedy packing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/error_of.h"
#include "tidal/data/instruction_record.h"
#include "tidal/data/instruction_sample.h"

namespace tidal::data {
namespace {

const Tokenizer& qwen_like_tokenizer() {
  static const Tokenizer tok =
      Tokenizer::train({"the system says hello to the user and the assistant answers", "What is two plus two? Four.",
                        "user assistant system hello hello answers"},
                       400, {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
  return tok;
}

std::vector<int64_t> cat(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::vector<int64_t> masked(const std::vector<int64_t>& ids) { return std::vector<int64_t>(ids.size(), kIgnoreIndex); }

InstructionSample sample_of(InstructionFormat f, const std::string& map_keys, const std::string& record,
                            int64_t eod = -1) {
  std::vector<ChatMessage> m;
  const std::string wrong = conversation_of(nlohmann::json::parse(record), parse_map_keys(f, map_keys), m);
  EXPECT_EQ(wrong, "");
  return encode_conversations(qwen_like_tokenizer(), {render_chat(PromptType::qwen, m)}, eod).at(0);
}

TEST(InstructionSample, AlpacaIdsAndLabels) {
  const Tokenizer& tok = qwen_like_tokenizer();
  const InstructionSample s =
      sample_of(InstructionFormat::alpaca, "",
                R"({"instruction": "What is two plus two?", "input": "", "output": "Four."})", tok.eod_id());
  const std::vector<int64_t> prompt = tok.encode(
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
      "<|im_start|>user\nWhat is two plus two?<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<int64_t> reply = tok.encode("Four.<|im_end|>\n");
  EXPECT_EQ(s.input_ids, cat({prompt, reply, {tok.eod_id()}}));
  EXPECT_EQ(s.labels, cat({masked(prompt), reply, {tok.eod_id()}}));
  // Here every segment boundary is a pre-token boundary: the ids are the whole text's.
  EXPECT_EQ(s.input_ids,
            cat({tok.encode("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                            "assistant.<|im_end|>\n<|im_start|>user\nWhat is two plus two?<|im_end|>\n"
                            "<|im_start|>assistant\nFour.<|im_end|>\n"),
                 {tok.eod_id()}}));
}

TEST(InstructionSample, ShareGptEveryReplyTrainedEveryOtherTurnMasked) {
  const Tokenizer& tok = qwen_like_tokenizer();
  const InstructionSample s = sample_of(InstructionFormat::sharegpt, "",
                                        R"({"conversations": [{"from": "system", "value": "Be brief."},
      {"from": "human", "value": "hello"}, {"from": "gpt", "value": "hello user"},
      {"from": "human", "value": "What is two plus two?"}, {"from": "gpt", "value": "Four."}]})");
  const auto p1 =
      tok.encode("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n");
  const auto r1 = tok.encode("hello user<|im_end|>\n");
  const auto p2 = tok.encode("<|im_start|>user\nWhat is two plus two?<|im_end|>\n<|im_start|>assistant\n");
  const auto r2 = tok.encode("Four.<|im_end|>\n");
  EXPECT_EQ(s.input_ids, cat({p1, r1, p2, r2}));
  EXPECT_EQ(s.labels, cat({masked(p1), r1, masked(p2), r2}));
}

TEST(InstructionSample, TemplateTokensMustBeAddedTokens) {
  EXPECT_NO_THROW(check_template_tokens(qwen_like_tokenizer(), PromptType::qwen, "tok.json"));
  EXPECT_NO_THROW(check_template_tokens(qwen_like_tokenizer(), PromptType::empty, "tok.json"));
  const std::string e =
      testing::error_of([] { check_template_tokens(qwen_like_tokenizer(), PromptType::llama3, "tok.json"); });
  EXPECT_NE(e.find("--prompt-type llama3 writes '<|begin_of_text|>', which the tokenizer tok.json does not hold"),
            std::string::npos)
      << e;
}

TEST(InstructionSample, GreedyPackingAsMindSpeed) {
  // Sorted: 2 2 3 5 8. Pack 1: 8, then the last-read 2 (sample 4). Pack 2: 5, 3, 2 (sample 3).
  const auto packs = pack_greedy({5, 3, 8, 2, 2}, 10);
  ASSERT_EQ(packs.size(), 2u);
  EXPECT_EQ(packs[0], (std::vector<size_t>{2, 4}));
  EXPECT_EQ(packs[1], (std::vector<size_t>{0, 1, 3}));
  EXPECT_EQ(pack_greedy({4, 4, 4}, 4).size(), 3u);
  EXPECT_TRUE(pack_greedy({}, 4).empty());
  EXPECT_THROW(pack_greedy({5}, 4), tidal::Error);
}

}  // namespace
}  // namespace tidal::data
