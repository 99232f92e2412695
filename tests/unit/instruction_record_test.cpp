// Instruction records as conversations (data/instruction_record.h): MindSpeed-LLM's Alpaca and ShareGPT
// handlers, their default keys and --map-keys, and what makes a record unusable.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/error_of.h"
#include "tidal/data/instruction_record.h"

namespace tidal::data {
namespace {

using nlohmann::json;

std::vector<ChatMessage> convert(const InstructionKeys& k, const std::string& record, std::string* wrong = nullptr) {
  std::vector<ChatMessage> out;
  const std::string w = conversation_of(json::parse(record), k, out);
  if (wrong != nullptr) *wrong = w;
  EXPECT_TRUE(wrong != nullptr || w.empty()) << w;
  return out;
}

void expect_turns(const std::vector<ChatMessage>& got, const std::vector<std::pair<Role, std::string>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].role, want[i].first) << i;
    EXPECT_EQ(got[i].content, want[i].second) << i;
  }
}

TEST(InstructionRecord, AlpacaJoinsInstructionAndInput) {
  const InstructionKeys k = parse_map_keys(InstructionFormat::alpaca, "");
  expect_turns(convert(k, R"({"instruction": "Add", "input": "2+2", "output": "4", "history": [["a", "b"]]})"),
               {{Role::user, "Add\n2+2"}, {Role::assistant, "4"}});  // history unread unless mapped (MindSpeed)
  expect_turns(convert(k, R"({"instruction": "Name a colour.", "input": "", "output": "Blue."})"),
               {{Role::user, "Name a colour."}, {Role::assistant, "Blue."}});
  expect_turns(convert(k, R"({"instruction": "Hi", "output": ""})"), {{Role::user, "Hi"}, {Role::assistant, ""}});
}

TEST(InstructionRecord, AlpacaHistoryAndSystemThroughMapKeys) {
  const InstructionKeys k =
      parse_map_keys(InstructionFormat::alpaca,
                     R"({"prompt": "q", "query": "ctx", "response": "a", "history": "past", "system": "sys"})");
  expect_turns(convert(k, R"({"q": "Q3", "ctx": "", "a": "A3", "past": [["Q1", "A1"], ["Q2", "A2"]], "sys": "S"})"),
               {{Role::system, "S"},
                {Role::user, "Q1"},
                {Role::assistant, "A1"},
                {Role::user, "Q2"},
                {Role::assistant, "A2"},
                {Role::user, "Q3"},
                {Role::assistant, "A3"}});
  // An empty system is no system (the template's default applies).
  expect_turns(convert(k, R"({"q": "Q", "a": "A", "sys": ""})"), {{Role::user, "Q"}, {Role::assistant, "A"}});
}

TEST(InstructionRecord, AlpacaSaysWhatIsMissing) {
  const InstructionKeys k = parse_map_keys(InstructionFormat::alpaca, R"({"history": "history"})");
  std::string wrong;
  convert(k, R"({"instruction": "Q"})", &wrong);
  EXPECT_EQ(wrong, "no key 'output' (the response column; --map-keys renames it)");
  convert(k, R"({"instruction": 3, "output": "A"})", &wrong);
  EXPECT_EQ(wrong, "'instruction' is an integer, not a string");
  convert(k, R"({"instruction": "Q", "output": "A", "history": [["only one"]]})", &wrong);
  EXPECT_NE(wrong.find("[query, response] pair"), std::string::npos) << wrong;
}

TEST(InstructionRecord, SharegptMultiTurnWithSystem) {
  const InstructionKeys k = parse_map_keys(InstructionFormat::sharegpt, "");
  expect_turns(
      convert(k, R"({"conversations": [{"from": "system", "value": "S"}, {"from": "human", "value": "Q1"},
                   {"from": "gpt", "value": "A1"}, {"from": "human", "value": "Q2"}, {"from": "gpt", "value": "A2"}]})"),
      {{Role::system, "S"}, {Role::user, "Q1"}, {Role::assistant, "A1"}, {Role::user, "Q2"}, {Role::assistant, "A2"}});
}

TEST(InstructionRecord, SharegptTagsAndSystemKeyThroughMapKeys) {
  const InstructionKeys k =
      parse_map_keys(InstructionFormat::sharegpt,
                     R"({"messages": "messages", "system": "sys", "tags": {"role_tag": "role", "content_tag": "content",
          "user_tag": "user", "assistant_tag": "assistant"}})");
  expect_turns(convert(k, R"({"sys": "S", "messages": [{"role": "user", "content": "Q"},
                                                        {"role": "assistant", "content": "A"}]})"),
               {{Role::system, "S"}, {Role::user, "Q"}, {Role::assistant, "A"}});
}

TEST(InstructionRecord, SharegptRefusesBrokenConversations) {
  const InstructionKeys k = parse_map_keys(InstructionFormat::sharegpt, "");
  std::string wrong;
  convert(k, R"({"conversations": [{"from": "gpt", "value": "A"}]})", &wrong);
  EXPECT_NE(wrong.find("is from 'gpt' where 'human' or 'observation' belongs"), std::string::npos) << wrong;
  convert(k, R"({"conversations": [{"from": "human", "value": "Q"}]})", &wrong);
  EXPECT_NE(wrong.find("does not end with a reply from 'gpt'"), std::string::npos) << wrong;
  convert(k, R"({"conversations": [{"from": "human", "text": "Q"}]})", &wrong);
  EXPECT_NE(wrong.find("no string 'value'"), std::string::npos) << wrong;
  convert(k, R"({"messages": []})", &wrong);
  EXPECT_EQ(wrong, "no key 'conversations' (the messages column; --map-keys renames it)");
}

TEST(InstructionRecord, SharegptToolTurnsAndTools) {
  // LLaMA-Factory's tags: function_call turns stand where replies do, observation turns where user turns do; the
  // tools column is read only when mapped (MindSpeed's InstructionDatasetAttr.tools defaults to None).
  const std::string record =
      R"({"conversations": [{"from": "human", "value": "Q"},
          {"from": "function_call", "value": "{\"name\": \"f\", \"arguments\": {\"x\": 1}}"},
          {"from": "observation", "value": "R"}, {"from": "gpt", "value": "A"}],
          "tools": "[{\"name\": \"f\"}]"})";
  std::vector<ChatMessage> out;
  std::string tools = "stale";
  EXPECT_EQ(conversation_of(json::parse(record), parse_map_keys(InstructionFormat::sharegpt, ""), out, &tools), "");
  EXPECT_EQ(tools, "");
  expect_turns(out, {{Role::user, "Q"},
                     {Role::function_call, R"({"name": "f", "arguments": {"x": 1}})"},
                     {Role::observation, "R"},
                     {Role::assistant, "A"}});
  const InstructionKeys k = parse_map_keys(InstructionFormat::sharegpt, R"({"tools": "tools"})");
  EXPECT_EQ(conversation_of(json::parse(record), k, out, &tools), "");
  EXPECT_EQ(tools, R"([{"name": "f"}])");
  // A conversation may end with a call; renamed tags work as the others.
  const InstructionKeys openai = parse_map_keys(
      InstructionFormat::sharegpt, R"({"messages": "messages", "tags": {"role_tag": "role", "content_tag": "content",
          "user_tag": "user", "assistant_tag": "assistant", "observation_tag": "tool", "function_tag": "call"}})");
  expect_turns(convert(openai, R"({"messages": [{"role": "user", "content": "Q"},
                                                {"role": "call", "content": "{\"name\": \"g\"}"}]})"),
               {{Role::user, "Q"}, {Role::function_call, R"({"name": "g"})"}});
  // What is wrong with a tool record, for --on-bad-line.
  std::string wrong;
  convert(k, R"({"conversations": [{"from": "human", "value": "Q"}, {"from": "function_call", "value": "f of 1"}]})",
          &wrong);
  EXPECT_NE(wrong.find("message 1 of 'conversations': a function_call turn is not JSON"), std::string::npos) << wrong;
  convert(k, R"({"conversations": [{"from": "function_call", "value": "{}"}]})", &wrong);
  EXPECT_NE(wrong.find("is from 'function_call' where 'human' or 'observation' belongs"), std::string::npos) << wrong;
  // LLaMA-Factory accepts an observation where any user turn stands, the first included.
  expect_turns(
      convert(k, R"({"conversations": [{"from": "observation", "value": "R"}, {"from": "gpt", "value": "A"}]})"),
      {{Role::observation, "R"}, {Role::assistant, "A"}});
  std::string list_wrong =
      conversation_of(json::parse(R"({"conversations": [{"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}],
                      "tools": [{"name": "f"}]})"),
                      k, out, &tools);
  EXPECT_NE(list_wrong.find("'tools' is an array, not a string"), std::string::npos) << list_wrong;
  list_wrong =
      conversation_of(json::parse(R"({"conversations": [{"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}],
                      "tools": "{\"name\": \"f\"}"})"),
                      k, out, &tools);
  EXPECT_NE(list_wrong.find("the tools column holds an object, not a list of functions"), std::string::npos)
      << list_wrong;
}

TEST(InstructionRecord, RefusesUnknownHandlersAndColumns) {
  EXPECT_NE(testing::error_of([] {
              parse_handler_name("GeneralInstructionHandler");
            }).find("AlpacaStyleInstructionHandler or SharegptStyleInstructionHandler"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              parse_map_keys(InstructionFormat::alpaca, R"({"messages": "m"})");
            }).find("'messages' is not a column of AlpacaStyleInstructionHandler"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              parse_map_keys(InstructionFormat::sharegpt, R"({"tags": {"tool_tag": "x"}})");
            }).find("tag 'tool_tag' is not one tidal reads"),
            std::string::npos);
  EXPECT_THROW(parse_map_keys(InstructionFormat::alpaca, "[1]"), tidal::Error);
  EXPECT_THROW(parse_map_keys(InstructionFormat::alpaca, R"({"prompt": 1})"), tidal::Error);
}

}  // namespace
}  // namespace tidal::data
