// Chat templates against transformers' own rendering of the published chat_template (tests/fixtures/chat/,
// written by scripts/chat_fixtures.py): every prompt type, every conversation, byte for byte; tool use for qwen
// against transformers, for chatml against MindSpeed-LLM's formatters (its chatml template, hand-derived).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/chat_fixtures.h"
#include "tests/support/error_of.h"
#include "tidal/base/error.h"
#include "tidal/data/chat_template.h"

namespace tidal::data {
namespace {

using testing::chat_fixture_dir;
using testing::chat_messages_of;
using testing::read_json_file;

// The first byte where two strings differ, with a little context, for the failure message.
std::string first_difference(const std::string& a, const std::string& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  const size_t from = i < 20 ? 0 : i - 20;
  return "at byte " + std::to_string(i) + ": tidal '" + a.substr(from, 40) + "' vs transformers '" +
         b.substr(from, 40) + "'";
}

class TemplateGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(TemplateGolden, RendersAsTransformers) {
  const std::string type = GetParam();
  const nlohmann::json rows = read_json_file(chat_fixture_dir() + type + "/rendered.json");
  ASSERT_GE(rows.size(), 6u);
  for (const auto& row : rows) {
    const std::vector<ChatSegment> segs = render_chat(parse_prompt_type(type), chat_messages_of(row.at("messages")));
    const std::string mine = joined_text(segs), golden = row.at("text").get<std::string>();
    EXPECT_EQ(mine, golden) << type << " / " << row.at("name").get<std::string>() << ": "
                            << first_difference(mine, golden);
    // Something is trained (every conversation ends with a reply, and each template writes an end-of-turn
    // text after it, except empty's empty reply).
    bool trained = false;
    for (const ChatSegment& s : segs) trained = trained || s.trained;
    EXPECT_TRUE(trained || type == "empty") << type;
  }
}

INSTANTIATE_TEST_SUITE_P(PromptTypes, TemplateGolden,
                         ::testing::Values("qwen", "chatml", "llama3", "mistral", "gemma", "deepseek3", "alpaca",
                                           "empty"));

TEST(ChatTemplate, TrainsOnlyTheAssistantReplies) {
  const std::vector<ChatMessage> m = {
      {Role::system, "S"}, {Role::user, "Q1"}, {Role::assistant, "A1"}, {Role::user, "Q2"}, {Role::assistant, "A2"}};
  const std::vector<ChatSegment> s = render_chat(PromptType::qwen, m);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].text, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(s[0].trained);
  EXPECT_EQ(s[1].text, "A1<|im_end|>\n");
  EXPECT_TRUE(s[1].trained);
  EXPECT_EQ(s[2].text, "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(s[2].trained);
  EXPECT_EQ(s[3].text, "A2<|im_end|>\n");
  EXPECT_TRUE(s[3].trained);
}

TEST(ChatTemplate, RefusesWhatNoTemplateRenders) {
  EXPECT_THROW(parse_prompt_type("qwen3"), tidal::Error);
  try {
    parse_prompt_type("llama2");
  } catch (const tidal::Error& e) {
    EXPECT_NE(std::string(e.what()).find("qwen, llama3"), std::string::npos) << e.what();
  }
  // A conversation that does not end with a reply, or does not alternate.
  EXPECT_THROW(render_chat(PromptType::qwen, {{Role::user, "Q"}}), tidal::Error);
  EXPECT_THROW(render_chat(PromptType::qwen, {{Role::user, "Q"}, {Role::user, "Q"}}), tidal::Error);
  EXPECT_THROW(render_chat(PromptType::qwen, {{Role::assistant, "A"}, {Role::user, "Q"}}), tidal::Error);
  EXPECT_THROW(render_chat(PromptType::qwen, {}), tidal::Error);
}

TEST(ChatTemplate, QwenToolUseAsTransformers) {
  // tools_rendered.json: Qwen2.5's chat_template with tools, tool_calls and tool messages (scripts/chat_fixtures.py).
  const nlohmann::json rows = read_json_file(chat_fixture_dir() + "qwen/tools_rendered.json");
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& row : rows) {
    const std::vector<ChatMessage> m = chat_messages_of(row.at("messages"));
    const std::vector<ChatSegment> segs =
        render_chat(PromptType::qwen, m, "<|endoftext|>", row.at("tools").get<std::string>());
    const std::string mine = joined_text(segs), golden = row.at("text").get<std::string>();
    EXPECT_EQ(mine, golden) << row.at("name").get<std::string>() << ": " << first_difference(mine, golden);
    // The calls are trained like replies; the observations (and the tools text) are masked like user turns.
    for (const ChatSegment& seg : segs) {
      // Every masked segment holds a header; no trained one does (the replies, the calls with their <|im_end|>).
      EXPECT_EQ(seg.trained, seg.text.find("<|im_start|>") == std::string::npos) << seg.text;
      if (seg.trained) {
        EXPECT_EQ(seg.text.find("<tool_response>"), std::string::npos) << seg.text;
      }
    }
    EXPECT_TRUE(segs.back().trained);
  }
}

TEST(ChatTemplate, ChatmlToolUseAsMindSpeed) {
  // MindSpeed-LLM's chatml template (configs/finetune/templates.json): no format_function or format_tools, so
  // LLaMA-Factory's defaults (formatter.py's default_tool_formatter and FunctionFormatter "Action: {{name}}\n
  // Action Input: {{arguments}}" + eos, the eos replaced by <|im_end|>), and format_observation "<|im_start|>tool
  // \n{{content}}<|im_end|>\n". The expected text was written from those definitions and checked against
  // formatter.py's output.
  const std::string tools =
      R"([{"name": "get_weather", "description": "Weather of a city", "parameters": {"type": "object", )"
      R"("properties": {"city": {"type": "string", "description": "the city"}, "unit": {"type": "string", )"
      R"("enum": ["C", "F"]}}, "required": ["city"]}}])";
  const std::vector<ChatMessage> m = {
      {Role::user, "Weather in Köln?"},
      {Role::function_call, R"({"name": "get_weather", "arguments": {"city": "Köln", "unit": "C"}})"},
      {Role::observation, "9 C"},
      {Role::assistant, "9 °C."}};
  const std::vector<ChatSegment> s = render_chat(PromptType::chatml, m, "<|endoftext|>", tools);
  const std::string tool_text =
      "You have access to the following tools:\n> Tool Name: get_weather\nTool Description: Weather of a city\n"
      "Tool Args:\n  - city (string, required): the city\n  - unit (string): , should be one of [C, F]\n\n"
      "Use the following format if using a tool:\n```\nAction: tool name (one of [get_weather]).\nAction Input: "
      "the input to the tool, in a JSON format representing the kwargs (e.g. ```{\"input\": \"hello world\", "
      "\"num_beams\": 5}```).\n```\n";
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].text, "<|im_start|>system\n" + tool_text +
                           "<|im_end|>\n<|im_start|>user\nWeather in Köln?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(s[1].text, "Action: get_weather\nAction Input: {\"city\": \"Köln\", \"unit\": \"C\"}<|im_end|>\n");
  EXPECT_TRUE(s[1].trained);
  EXPECT_EQ(s[2].text, "<|im_start|>tool\n9 C<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(s[2].trained);
  EXPECT_EQ(s[3].text, "9 °C.<|im_end|>\n");
  // The default format calls one function per turn: a list of calls is refused, not rendered as nothing.
  EXPECT_THROW(
      render_chat(PromptType::chatml, {{Role::user, "Q"}, {Role::function_call, R"([{"name": "a"}, {"name": "b"}])"}}),
      tidal::Error);
}

TEST(ChatTemplate, RefusesToolTurnsWithoutAToolFormat) {
  const std::vector<ChatMessage> m = {{Role::user, "Q"},
                                      {Role::function_call, R"({"name": "f", "arguments": {}})"},
                                      {Role::observation, "r"},
                                      {Role::assistant, "A"}};
  for (PromptType t : {PromptType::llama3, PromptType::mistral, PromptType::gemma, PromptType::deepseek3,
                       PromptType::alpaca, PromptType::empty}) {
    const std::string e = testing::error_of([&] { render_chat(t, m); });
    EXPECT_NE(e.find(std::string("--prompt-type ") + prompt_type_name(t) + " has no tool format"), std::string::npos)
        << e;
    EXPECT_NE(testing::error_of([&] {
                render_chat(t, {{Role::user, "Q"}, {Role::assistant, "A"}}, "", "[{}]");
              }).find("has no tool format"),
              std::string::npos);
  }
  // A reply cannot open a conversation; a call that is not JSON is refused.
  EXPECT_THROW(render_chat(PromptType::qwen, {{Role::function_call, "{}"}, {Role::assistant, "A"}}), tidal::Error);
  EXPECT_THROW(render_chat(PromptType::qwen, {{Role::user, "Q"}, {Role::function_call, "f(x)"}}), tidal::Error);
}

TEST(ChatTemplate, TrimsAsJinjaDoes) {
  // Unicode spaces (NBSP, ideographic space) are stripped by Python's str.strip(), so by llama3's `trim`.
  const std::vector<ChatSegment> s =
      render_chat(PromptType::llama3, {{Role::user, "\xc2\xa0q\xe3\x80\x80"}, {Role::assistant, " a\n"}});
  EXPECT_NE(joined_text(s).find("\n\nq<|eot_id|>"), std::string::npos) << joined_text(s);
  EXPECT_EQ(s.back().text, "a<|eot_id|>");
}

}  // namespace
}  // namespace tidal::data
