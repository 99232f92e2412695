// Chat templates against transformers' own rendering of the published chat_template (tests/fixtures/chat/,
// written by scripts/chat_fixtures.py): every prompt type, every conversation, byte for byte.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tidal/base/error.h"
#include "tidal/data/chat_template.h"

namespace tidal::data {
namespace {

std::string fixture_path(const std::string& type) {
  return std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/chat/" + type + "/rendered.json";
}

std::vector<ChatMessage> messages_of(const nlohmann::json& j) {
  std::vector<ChatMessage> out;
  for (const auto& m : j) {
    const std::string role = m.at("role").get<std::string>();
    out.push_back({role == "system" ? Role::system
                   : role == "user" ? Role::user
                                    : Role::assistant,
                   m.at("content").get<std::string>()});
  }
  return out;
}

// The first byte where two strings differ, with a little context, for the failure message.
std::string first_difference(const std::string& a, const std::string& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  const size_t from = i < 20 ? 0 : i - 20;
  return "at byte " + std::to_string(i) + ": tidal '" + a.substr(from, 40) + "' vs transformers '" +
         b.substr(from, 40) + "'";
}

class TemplateGolden : public testing::TestWithParam<const char*> {};

TEST_P(TemplateGolden, RendersAsTransformers) {
  const std::string type = GetParam();
  std::ifstream in(fixture_path(type));
  ASSERT_TRUE(in) << fixture_path(type);
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json rows = nlohmann::json::parse(ss.str());
  ASSERT_GE(rows.size(), 6u);
  for (const auto& row : rows) {
    const std::vector<ChatSegment> segs = render_chat(parse_prompt_type(type), messages_of(row.at("messages")));
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
                         testing::Values("qwen", "chatml", "llama3", "mistral", "gemma", "deepseek3", "alpaca",
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

TEST(ChatTemplate, TrimsAsJinjaDoes) {
  // Unicode spaces (NBSP, ideographic space) are stripped by Python's str.strip(), so by llama3's `trim`.
  const std::vector<ChatSegment> s =
      render_chat(PromptType::llama3, {{Role::user, "\xc2\xa0q\xe3\x80\x80"}, {Role::assistant, " a\n"}});
  EXPECT_NE(joined_text(s).find("\n\nq<|eot_id|>"), std::string::npos) << joined_text(s);
  EXPECT_EQ(s.back().text, "a<|eot_id|>");
}

}  // namespace
}  // namespace tidal::data
