#pragma once
// The chat-template golden files of tests/fixtures/chat/ (scripts/chat_fixtures.py): a JSON file read whole, and
// a golden row's messages ({"role", "content"}, roles as tidal names them) as ChatMessages.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tidal/data/chat_template.h"

namespace tidal::testing {

inline std::string chat_fixture_dir() { return std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/chat/"; }

inline nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

inline std::vector<data::ChatMessage> chat_messages_of(const nlohmann::json& j) {
  using data::Role;
  std::vector<data::ChatMessage> out;
  for (const auto& m : j) {
    const std::string role = m.at("role").get<std::string>();
    out.push_back({role == "system"          ? Role::system
                   : role == "user"          ? Role::user
                   : role == "function_call" ? Role::function_call
                   : role == "observation"   ? Role::observation
                                             : Role::assistant,
                   m.at("content").get<std::string>()});
  }
  return out;
}

}  // namespace tidal::testing
