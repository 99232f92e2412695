// The rope types of Hugging Face configs against transformers itself: inv_freq, the cos/sin factor and
// the last row of the cos table of each case in tests/fixtures/hf/rope_inv_freq.json (written by
// scripts/hf_fixtures.py from LlamaRotaryEmbedding), read from a config in transformers 5's format
// (rope_parameters) and in 4.x's (rope_theta + rope_scaling with "type"), which must give one config.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "tidal/base/json.h"
#include "tidal/io/atomic_file.h"
#include "tidal/models/config.h"
#include "tidal/ops/rope.h"

namespace tidal::models {
namespace {

using json = nlohmann::json;

json fixture() {
  const std::string path = std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/hf/rope_inv_freq.json";
  return parse_json(io::read_file(path), path);
}

json llama_config(const json& c) {
  const int64_t hd = c["head_dim"];
  return {{"model_type", "llama"},  {"vocab_size", 32},
          {"hidden_size", 4 * hd},  {"intermediate_size", 8},
          {"num_hidden_layers", 1}, {"num_attention_heads", 4},
          {"head_dim", hd},         {"max_position_embeddings", c["max_position_embeddings"]}};
}

// transformers 5: {"rope_parameters": {"rope_theta": ..., "rope_type": ..., ...}}.
json new_format(const json& c) {
  json j = llama_config(c);
  j["rope_parameters"] = c["rope_parameters"];
  return j;
}

// transformers 4.x: a top-level rope_theta, and the rest as rope_scaling with the old key "type".
json old_format(const json& c) {
  json j = llama_config(c), scaling = c["rope_parameters"];
  j["rope_theta"] = scaling["rope_theta"];
  scaling.erase("rope_theta");
  const std::string type = scaling["rope_type"];
  scaling.erase("rope_type");
  if (type != "default") {
    scaling["type"] = type;
    j["rope_scaling"] = scaling;
  } else {
    j["rope_scaling"] = nullptr;
  }
  return j;
}

TEST(HfRope, EveryRopeTypeMatchesTransformers) {
  const json all = fixture();
  ASSERT_GE(all["cases"].size(), 10u);
  for (const json& c : all["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const ModelConfig cfg = config_from_json(new_format(c));
    const int64_t seq = c["seq_len"];
    const RopeFrequencies f = cfg.rope_frequencies(seq);
    const std::vector<double> want = c["inv_freq"].get<std::vector<double>>();
    ASSERT_EQ(f.inv_freq.size(), want.size());
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double rel = std::abs(f.inv_freq[i] - want[i]) / want[i];
      if (rel > worst) worst = rel, at = i;
    }
    // transformers computes inv_freq in f32, tidal in f64: a few f32 roundings apart.
    EXPECT_LT(worst, 1e-6) << "inv_freq[" << at << "] = " << f.inv_freq[at] << ", transformers " << want[at];
    EXPECT_NEAR(f.attention_scaling, c["attention_scaling"].get<double>(), 1e-12);
    // The table's last row: cos(pos * inv_freq) * attention_scaling. transformers rounds the angle to f32
    // (pos * 2^-24 rad at position pos).
    const RopeTables t = rope_tables(seq, f, DType::f64);
    const std::vector<double> cos_last = c["cos_last_row"].get<std::vector<double>>();
    ASSERT_EQ(int64_t(cos_last.size()), t.cos.size(1));
    const double* row = t.cos.data<double>() + (seq - 1) * t.cos.size(1);
    for (size_t i = 0; i < cos_last.size(); ++i)
      ASSERT_NEAR(row[i], cos_last[i], 2e-7 * double(seq) + 1e-6) << "cos[" << seq - 1 << ", " << i << "]";
    // 4.x's format is the same config.
    const ModelConfig legacy = config_from_json(old_format(c));
    EXPECT_EQ(config_to_json(legacy), config_to_json(cfg));
    EXPECT_TRUE(legacy.rope_scaling == cfg.rope_scaling);
    EXPECT_EQ(legacy.rope_theta, cfg.rope_theta);
  }
}

TEST(HfRope, ScaledTypesDifferFromTheStandardTable) {
  // A check that the goldens above can fail: every scaled case's frequencies differ from the plain ones.
  const json all = fixture();  // kept: a range-for over fixture()["cases"] would outlive the temporary
  for (const json& c : all["cases"]) {
    const std::string name = c["name"];
    if (name.starts_with("default") || name == "dynamic_short") continue;
    const ModelConfig cfg = config_from_json(new_format(c));
    const RopeFrequencies plain = rope_frequencies(cfg.head_size(), cfg.rope_theta);
    const RopeFrequencies scaled = cfg.rope_frequencies(c["seq_len"]);
    EXPECT_TRUE(plain.inv_freq != scaled.inv_freq || plain.attention_scaling != scaled.attention_scaling) << name;
  }
}

TEST(HfRope, SavedConfigReadsBackTheSame) {
  // config_to_json writes rope_theta and rope_scaling, which both transformers versions read.
  const json all = fixture();
  for (const json& c : all["cases"]) {
    const ModelConfig cfg = config_from_json(new_format(c));
    const ModelConfig back = config_from_json(config_to_json(cfg));
    EXPECT_TRUE(back.rope_scaling == cfg.rope_scaling) << c["name"];
    EXPECT_EQ(back.rope_theta, cfg.rope_theta) << c["name"];
  }
}

}  // namespace
}  // namespace tidal::models
