// Every field of transformers' config classes for the families tidal builds (GPT2Config, LlamaConfig,
// MistralConfig, Qwen2Config, Qwen3Config, Qwen3MoeConfig, Gemma3TextConfig, DeepseekV3Config in 4.x and 5.x, listed by
// scripts/hf_fixtures.py into tests/fixtures/hf/config_fields/) is either read by config_from_json (looked at: used, or
// checked and refused when its value changes the math) or listed as harmless with its reason (models/config_fields.h).
// A new field in transformers fails here until someone decides which.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "tidal/base/json.h"
#include "tidal/io/atomic_file.h"
#include "tidal/models/config.h"
#include "tidal/models/config_fields.h"

namespace tidal::models {
namespace {

using json = nlohmann::json;

std::vector<std::string> fixture_files() {
  std::vector<std::string> files;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/hf/config_fields"))
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// The fields of `fields` that tidal neither reads (parsing `defaults`) nor lists as harmless.
std::vector<std::string> unaccounted(const json& fields, const json& defaults) {
  std::set<std::string> read;
  const ModelConfig c = config_from_json(defaults, "defaults", &read);
  std::set<std::string> harmless;
  for (const HarmlessField& h : harmless_config_fields(c.model_type)) harmless.insert(h.name);
  std::vector<std::string> out;
  for (const json& f : fields)
    if (!read.count(f.get<std::string>()) && !harmless.count(f.get<std::string>())) out.push_back(f);
  return out;
}

TEST(HfConfigFields, EveryFieldOfEveryFamilyIsReadOrHarmless) {
  const std::vector<std::string> files = fixture_files();
  ASSERT_EQ(files.size(), 18u);  // 8 families and the multimodal Gemma 3 x transformers 4.x and 5.x
  for (const std::string& path : files) {
    const json j = parse_json(io::read_file(path), path);
    std::string missing;
    for (const std::string& f : unaccounted(j["fields"], j["defaults"])) missing += " " + f;
    EXPECT_TRUE(missing.empty()) << path << " (" << j["class"] << ", transformers " << j["transformers"]
                                 << "): fields tidal neither reads nor lists as harmless:" << missing;
  }
}

TEST(HfConfigFields, AnUnknownFieldIsReported) {
  const json j = parse_json(io::read_file(fixture_files().front()), "fixture");
  json fields = j["fields"];
  fields.push_back("rope_scaling_v6");
  EXPECT_EQ(unaccounted(fields, j["defaults"]), std::vector<std::string>{"rope_scaling_v6"});
}

TEST(HfConfigFields, HarmlessFieldsAreNotAlsoRead) {
  // A field that tidal reads is not harmless: its value matters. Keeps the list honest as reading grows.
  for (const std::string& path : fixture_files()) {
    const json j = parse_json(io::read_file(path), path);
    std::set<std::string> read;
    const ModelConfig c = config_from_json(j["defaults"], "defaults", &read);
    for (const HarmlessField& h : harmless_config_fields(c.model_type)) {
      EXPECT_EQ(read.count(h.name), 0u) << h.name << " is read and listed as harmless (" << path << ")";
      EXPECT_GT(std::string(h.reason).size(), 10u) << h.name;
    }
  }
}

}  // namespace
}  // namespace tidal::models
