// --prompt-type-path (data/template_file.h, data/slot_template.h): MindSpeed-LLM's templates.json format. A file
// reproducing tidal's built-in templates renders every golden conversation byte for byte as the built-in one
// (the same text, the same bytes trained); MindSpeed's own file loads, and its qwen template renders as
// MindSpeed's Template._encode does; every bad input is an error naming the file, the template and the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/chat_fixtures.h"
#include "tests/support/error_of.h"
#include "tidal/base/error.h"
#include "tidal/data/chat_template.h"
#include "tidal/data/slot_template.h"
#include "tidal/data/template_file.h"

namespace tidal::data {
namespace {

using testing::chat_messages_of;
using testing::read_json_file;

const std::string kFixtures = testing::chat_fixture_dir();

// One character per byte of the rendering: 't' where trained, '.' where masked.
std::string trained_bytes(const std::vector<ChatSegment>& segments) {
  std::string out;
  for (const ChatSegment& s : segments) out.append(s.text.size(), s.trained ? 't' : '.');
  return out;
}

void expect_same(const std::vector<ChatSegment>& file, const std::vector<ChatSegment>& builtin,
                 const std::string& what) {
  EXPECT_EQ(joined_text(file), joined_text(builtin)) << what;
  EXPECT_EQ(trained_bytes(file), trained_bytes(builtin)) << what;
}

const SpecialTexts kSpecial{"<｜begin▁of▁sentence｜>", "<|endoftext|>"};

TEST(TemplateFile, ReproducesTheBuiltinTemplatesByteForByte) {
  const std::string path = kFixtures + "builtin_templates.json";
  for (const char* name : {"qwen", "chatml", "alpaca", "empty", "deepseek3"}) {
    const SlotTemplate t = load_template_file(path, name);
    int compared = 0;
    for (const auto& row : read_json_file(kFixtures + name + "/rendered.json")) {
      const std::vector<ChatMessage> m = chat_messages_of(row.at("messages"));
      bool think = false;  // deepseek3 drops a reply's text up to its last </think>, which slots cannot say
      for (const ChatMessage& msg : m) think = think || msg.content.find("</think>") != std::string::npos;
      if (think && std::string(name) == "deepseek3") continue;
      expect_same(render_slots(t, m, kSpecial), render_chat(parse_prompt_type(name), m),
                  std::string(name) + " / " + row.at("name").get<std::string>());
      ++compared;
    }
    EXPECT_GE(compared, 5) << name;
  }
  // Tool use too: qwen against the transformers goldens, chatml in MindSpeed's default tool format.
  const SlotTemplate qwen = load_template_file(path, "qwen");
  for (const auto& row : read_json_file(kFixtures + "qwen/tools_rendered.json")) {
    const std::vector<ChatMessage> m = chat_messages_of(row.at("messages"));
    const std::string tools = row.at("tools").get<std::string>();
    expect_same(render_slots(qwen, m, kSpecial, tools), render_chat(PromptType::qwen, m, "<|endoftext|>", tools),
                "qwen tools / " + row.at("name").get<std::string>());
    EXPECT_EQ(joined_text(render_slots(qwen, m, kSpecial, tools)), row.at("text").get<std::string>());
  }
  const std::vector<ChatMessage> call = {{Role::system, "S"},
                                         {Role::user, "Q"},
                                         {Role::function_call, R"({"name": "f", "arguments": {"x": [1, "é"]}})"},
                                         {Role::observation, "R"},
                                         {Role::assistant, "A"}};
  const std::string tools = R"([{"name": "f", "parameters": {"properties": {"x": {"type": "array"}}}}])";
  expect_same(render_slots(load_template_file(path, "chatml"), call, kSpecial, tools),
              render_chat(PromptType::chatml, call, "<|endoftext|>", tools), "chatml tools");
}

TEST(TemplateFile, MindSpeedsOwnFile) {
  // configs/finetune/templates.json of MindSpeed-LLM (tests/fixtures/chat/README.md): what tidal renders loads,
  // the rest is refused by the field that asks for it.
  const std::string path = kFixtures + "mindspeed_templates.json";
  std::vector<std::string> loaded, refused;
  for (const auto& entry : read_json_file(path)) {
    const std::string name = entry.at("name").get<std::string>();
    const std::string e = testing::error_of([&] { load_template_file(path, name); });
    (e == "no error" ? loaded : refused).push_back(name);
    if (e != "no error") {
      EXPECT_TRUE(e.find("efficient_eos: true is not supported") != std::string::npos ||
                  e.find("template_class: '") != std::string::npos || e.find("tool_format: '") != std::string::npos)
          << name << ": " << e;
    }
  }
  for (const char* name : {"qwen", "chatml", "llama3", "mistral", "alpaca", "empty", "deepseek3", "default", "llama2"})
    EXPECT_NE(std::find(loaded.begin(), loaded.end(), name), loaded.end()) << name;
  EXPECT_GE(loaded.size(), 15u);
  // MindSpeed's qwen (LLaMA-Factory 0.8.2's Template: a "\n" separator before each later user turn, the eos
  // replaced by the stop word <|im_end|>, the default tool format): the text and masks below are what its
  // Template.encode_multiturn gives with a tokenizer that keeps each slot's text (checked by running it).
  const SlotTemplate qwen = load_template_file(path, "qwen");
  const std::vector<ChatMessage> m = {
      {Role::user, "Q1"},       {Role::assistant, "A1"},
      {Role::user, "Q2"},       {Role::function_call, R"({"name": "f", "arguments": {"x": "é"}})"},
      {Role::observation, "R"}, {Role::assistant, "A2"}};
  const std::string tools =
      R"([{"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"x": {"type": )"
      R"("string", "description": "an x"}}, "required": ["x"]}}])";
  const std::vector<ChatSegment> s = render_slots(qwen, m, {"", "<|im_end|>"}, tools);
  std::vector<std::pair<std::string, std::string>> turns;  // (masked, trained) pairs, as MindSpeed's
  for (const ChatSegment& seg : s) {
    if (!seg.trained && (turns.empty() || !turns.back().second.empty())) turns.emplace_back();
    (seg.trained ? turns.back().second : turns.back().first) += seg.text;
  }
  ASSERT_EQ(turns.size(), 3u);
  EXPECT_EQ(turns[0].first,
            "<|im_start|>system\nYou are a helpful assistant.You have access to the following tools:\n> Tool Name: "
            "f\nTool Description: d\nTool Args:\n  - x (string, required): an x\n\nUse the following format if "
            "using a tool:\n```\nAction: tool name (one of [f]).\nAction Input: the input to the tool, in a JSON "
            "format representing the kwargs (e.g. ```{\"input\": \"hello world\", \"num_beams\": 5}```).\n```\n"
            "<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(turns[0].second, "A1<|im_end|>");
  EXPECT_EQ(turns[1].first, "\n<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(turns[1].second, "Action: f\nAction Input: {\"x\": \"é\"}<|im_end|>");
  EXPECT_EQ(turns[2].first, "\n<|im_start|>tool\nR<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(turns[2].second, "A2<|im_end|>");
  // One segment per slot, as MindSpeed encodes each on its own: the reply and its eos apart.
  EXPECT_EQ(s[2].text, "A1");
  EXPECT_EQ(s[3].text, "<|im_end|>");
  EXPECT_EQ(slot_template_tokens(qwen, {"", "<|im_end|>"}), (std::vector<std::string>{"<|im_end|>", "<|im_end|>"}));
}

class TemplateFileErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "tidal_template_file";
    std::filesystem::create_directories(dir_);
  }
  // The error of loading `name` from a file holding `text`.
  std::string error(const std::string& text, const std::string& name = "t") const {
    const std::string path = dir_ + "/templates.json";
    std::ofstream(path) << text;
    return testing::error_of([&] { load_template_file(path, name); });
  }
  std::string dir_;
};

TEST_F(TemplateFileErrors, NameTheFileTheTemplateAndTheField) {
  EXPECT_NE(testing::error_of([&] { load_template_file(dir_ + "/none.json", "qwen"); }).find("none.json is not a file"),
            std::string::npos);
  EXPECT_NE(error("[{\"name\": \"t\",}").find("templates.json"), std::string::npos);
  EXPECT_NE(error("{\"name\": \"t\"}").find("a template file is a list of templates"), std::string::npos);
  const std::string unknown = error(R"([{"name": "a"}, {"name": "b"}])", "qwen");
  EXPECT_NE(unknown.find("--prompt-type 'qwen' is not a template of"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("(it has a, b)"), std::string::npos) << unknown;
  const std::string field = error(R"([{"name": "t", "format_usr": {"slots": ["{{content}}"]}}])");
  EXPECT_NE(field.find("template 't', format_usr: unknown field"), std::string::npos) << field;
  EXPECT_NE(error(R"([{"name": "t", "format_user": "{{content}}"}])").find("format_user is a string, not an object"),
            std::string::npos);
  EXPECT_NE(error(R"([{"name": "t", "format_user": {"slots": [3]}}])").find("format_user.slots: a slot is an integer"),
            std::string::npos);
  EXPECT_NE(error(R"([{"name": "t", "format_user": {"slots": [["pad_token"]]}}])").find("[\"bos_token\"]"),
            std::string::npos);
  EXPECT_NE(error(R"([{"name": "t", "format_user": {"slots": ["Q:"]}}])").find("format_user: a placeholder"),
            std::string::npos);
  EXPECT_NE(error(R"([{"name": "t", "format_prefix": {"slots": ["{{content}}"]}}])").find("takes no placeholder"),
            std::string::npos);
  EXPECT_NE(error(R"([{"name": "t", "replace_eos": "yes"}])").find("replace_eos"), std::string::npos);
  EXPECT_NE(error(R"([{"name": "t", "replace_eos": true}])").find("needs stop_words"), std::string::npos);
  EXPECT_NE(error(R"([{"name": "t", "efficient_eos": true}])").find("efficient_eos: true is not supported"),
            std::string::npos);
  EXPECT_NE(error(R"([{"name": "t", "template_class": "ReasoningTemplate"}])").find("'ReasoningTemplate' is not"),
            std::string::npos);
  EXPECT_NE(error(R"([{"name": "t", "format_tools": {"tool_format": "glm4"}}])").find("'glm4' is not a tool format"),
            std::string::npos);
  EXPECT_NE(error(R"([{"name": "t", "format_function": {"slots": ["{{name}}"]}}])").find("{{arguments}}"),
            std::string::npos);
  EXPECT_NE(error(R"([{"name": "t", "stop_words": ["a", 1]}])").find("stop_words' entries"), std::string::npos);
  // null is MindSpeed's "absent".
  EXPECT_EQ(error(R"([{"name": "t", "format_user": null, "template_class": null}])"), "no error");
}

}  // namespace
}  // namespace tidal::data
