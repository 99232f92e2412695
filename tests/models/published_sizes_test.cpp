// Every published-size preset has the parameter count its model card publishes (transformers'
// num_parameters(), tied embeddings counted once): built on the meta device, and by the formula the
// planner uses (ModelConfig::parameter_count). A wrong width, vocabulary, bias or tie shows up here.
#include <gtest/gtest.h>

#include <set>

#include "tidal/models/causal_lm.h"

namespace tidal::models {
namespace {

struct Published {
  const char* preset;
  int64_t parameters;
};

constexpr Published kPublished[] = {
    {"gpt2-124m", 124439808},       {"gpt2-350m", 354823168},        {"llama3.2-1b", 1235814400},
    {"llama3.2-3b", 3212749824},    {"llama3.1-8b", 8030261248},     {"llama3.1-70b", 70553706496},
    {"mistral-7b", 7248023552},     {"mistral-7b-v0.1", 7241732096}, {"qwen2.5-0.5b", 494032768},
    {"qwen2.5-1.5b", 1543714304},   {"qwen2.5-3b", 3085938688},      {"qwen2.5-7b", 7615616512},
    {"qwen2.5-14b", 14770033664},   {"qwen2.5-32b", 32763876352},    {"qwen2.5-72b", 72706203648},
    {"qwen3-0.6b", 596049920},      {"qwen3-1.7b", 1720574976},      {"qwen3-8b", 8190735360},
    {"qwen3-30b-a3b", 30532122624}, {"gemma3-1b", 999885952},        {"gemma3-4b", 3880263168},
    {"gemma3-12b", 11766034176},    {"gemma3-27b", 27009346304},     {"deepseek-v3", 671026404352},
};

TEST(PublishedSizes, EveryPublishedPresetHasItsModelCardsParameterCount) {
  for (const Published& p : kPublished) {
    const ModelConfig c = preset(p.preset);
    EXPECT_EQ(c.parameter_count(), p.parameters) << p.preset;
    nn::Init init;
    init.device = Device::meta();
    EXPECT_EQ(create_model(c, init)->num_parameters(), p.parameters) << p.preset;
  }
}

TEST(PublishedSizes, EveryPresetIsEitherTinyOrPublished) {
  std::set<std::string> published;
  for (const Published& p : kPublished) published.insert(p.preset);
  for (const Preset& p : presets()) {
    const bool small = p.name.rfind("tiny-", 0) == 0 || p.name.rfind("small-", 0) == 0;
    EXPECT_TRUE(small || published.count(p.name)) << p.name << " has no published parameter count in this test";
  }
}

}  // namespace
}  // namespace tidal::models
