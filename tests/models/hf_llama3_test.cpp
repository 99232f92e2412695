// The Llama 3 row of hf_golden_test.cpp's table (tests/fixtures/hf/tiny_llama3: rope_theta 500000 and
// llama3 scaling in rope_parameters, saved by transformers 5) read from a transformers 4.x-style
// config.json gives the same logits; and the rope table matters: the same weights with the plain RoPE
// table (what tidal computed before it read rope_parameters) are far off transformers' logits.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/models/hf_golden.h"
#include "tidal/base/json.h"
#include "tidal/io/atomic_file.h"

namespace tidal::models {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kDir = fixture_dir("tiny_llama3");

// A copy of the fixture directory with `config` as its config.json.
std::string with_config(const std::string& name, const json& config) {
  const std::string dir = ::testing::TempDir() + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kDir + "/model.safetensors", dir + "/model.safetensors");
  std::ofstream(dir + "/config.json") << config.dump(2);
  return dir;
}

TEST(HfLlama3, V4ConfigAndRopeTable) {
  const GoldenFiles golden = load_golden("tiny_llama3");
  const Tensor ids = golden.at("input_ids"), want = golden.at("logits");  // (B, T), (B, T, V)
  const json config = parse_json(io::read_file(kDir + "/config.json"), "config.json");
  ASSERT_TRUE(config.contains("rope_parameters"));  // transformers 5's format
  ASSERT_FALSE(config.contains("rope_theta"));

  const Tensor got = golden_logits(kDir, ids);  // (B, T, V)
  EXPECT_LT(relative_error(got, want), 1e-4) << "tidal vs transformers logits, max |diff| / max |ref|";

  // transformers 4.x's format: top-level rope_theta, rope_scaling with "type".
  json legacy = config;
  json scaling = legacy["rope_parameters"];
  legacy.erase("rope_parameters");
  legacy["rope_theta"] = scaling["rope_theta"];
  scaling.erase("rope_theta");
  scaling["type"] = scaling["rope_type"];
  scaling.erase("rope_type");
  legacy["rope_scaling"] = scaling;
  legacy["torch_dtype"] = legacy["dtype"];
  legacy.erase("dtype");
  const Tensor got_legacy = golden_logits(with_config("tidal_hf_llama3_v4", legacy), ids);
  EXPECT_EQ(relative_error(got_legacy, got), 0.0);

  // The plain table at rope_theta 10000, and at 500000 without the llama3 scaling: both far off.
  json plain = config;
  plain["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  const double err_plain = relative_error(golden_logits(with_config("tidal_hf_llama3_plain", plain), ids), want);
  EXPECT_GT(err_plain, 1e-2);
  plain["rope_parameters"]["rope_theta"] = 500000.0;
  const double err_unscaled = relative_error(golden_logits(with_config("tidal_hf_llama3_unscaled", plain), ids), want);
  EXPECT_GT(err_unscaled, 1e-3);
  std::printf("tiny llama3 with the plain rope table: %.3g (theta 10000), %.3g (theta 500000)\n", err_plain,
              err_unscaled);
}

}  // namespace
}  // namespace tidal::models
