#pragma once
// The config.json of a golden-table directory (tests/fixtures/hf/<dir>/, written by transformers 5), and
// the message config_from_json gives for an edited one: for the config-reading tests of a family.
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/error_of.h"
#include "tidal/base/json.h"
#include "tidal/io/atomic_file.h"
#include "tidal/models/config.h"

namespace tidal::testing {

inline nlohmann::json hf_fixture_config(const std::string& dir) {
  const std::string path = std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/hf/" + dir + "/config.json";
  return parse_json(io::read_file(path), path);
}

inline std::string config_error(const nlohmann::json& j, const std::string& source) {
  return error_of([&] { models::config_from_json(j, source); });
}

}  // namespace tidal::testing
