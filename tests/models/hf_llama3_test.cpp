// A tiny Llama saved by transformers 5 (tests/fixtures/hf/tiny_llama3: rope_theta 500000 and llama3
// scaling in rope_parameters, written by scripts/hf_fixtures.py) gives transformers' own logits
// (golden.safetensors) in tidal, within docs/parity.md's f32 tolerance; the same directory with a
// transformers 4.x-style config.json gives the same logits; and the test can fail: the same weights with
// the plain RoPE table (what tidal computed before it read rope_parameters) are far off.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tidal/autograd/grad_mode.h"
#include "tidal/base/json.h"
#include "tidal/io/atomic_file.h"
#include "tidal/io/safetensors.h"
#include "tidal/models/pretrained.h"

namespace tidal::models {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kDir = std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/hf/tiny_llama3";

// max |a - b| / max |b|, docs/parity.md's measure.
double relative_error(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const Tensor x = a.contiguous(), y = b.contiguous();
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    diff = std::max(diff, double(std::abs(x.data<float>()[i] - y.data<float>()[i])));
    scale = std::max(scale, double(std::abs(y.data<float>()[i])));
  }
  return diff / scale;
}

// A copy of the fixture directory with `config` as its config.json.
std::string with_config(const std::string& name, const json& config) {
  const std::string dir = ::testing::TempDir() + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kDir + "/model.safetensors", dir + "/model.safetensors");
  std::ofstream(dir + "/config.json") << config.dump(2);
  return dir;
}

Tensor logits_of(const std::string& dir, const Tensor& ids) {
  NoGradGuard no_grad;
  return load_pretrained_model(dir)->forward(ids).logits;
}

TEST(HfLlama3, TransformersGoldenLogits) {
  const auto golden = io::load_safetensors(kDir + "/golden.safetensors").tensors;
  const Tensor ids = golden.at("input_ids"), want = golden.at("logits");
  const json config = parse_json(io::read_file(kDir + "/config.json"), "config.json");
  ASSERT_TRUE(config.contains("rope_parameters"));  // transformers 5's format
  ASSERT_FALSE(config.contains("rope_theta"));

  const Tensor got = logits_of(kDir, ids);
  const double err = relative_error(got, want);
  EXPECT_LT(err, 1e-4) << "tidal vs transformers logits, max |diff| / max |ref|";
  std::printf("tiny llama3 (rope_theta 500000, llama3 scaling) vs transformers %s: %.3g\n",
              io::load_safetensors(kDir + "/golden.safetensors").metadata["transformers"].c_str(), err);

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
  const Tensor got_legacy = logits_of(with_config("tidal_hf_llama3_v4", legacy), ids);
  EXPECT_EQ(relative_error(got_legacy, got), 0.0);

  // The plain table at rope_theta 10000, and at 500000 without the llama3 scaling: both far off.
  json plain = config;
  plain["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  EXPECT_GT(relative_error(logits_of(with_config("tidal_hf_llama3_plain", plain), ids), want), 1e-2);
  plain["rope_parameters"]["rope_theta"] = 500000.0;
  EXPECT_GT(relative_error(logits_of(with_config("tidal_hf_llama3_unscaled", plain), ids), want), 1e-3);
}

}  // namespace
}  // namespace tidal::models
