// DeepSeek-V4's own recompute flags as the user meets them: MindSpeed-LLM's rules (refused on other models, on a V4
// without compressed layers, next to full uniform recompute), the plan (compressed layers only, none under full
// recompute), the description, JSON and flags, and the table of saved tensors (--report-memory) with what became of
// the mHC mappings, the mid-layer streams and the compressed attention's tensors.
#include <gtest/gtest.h>

// Modes are written as partial aggregates: the fields left out keep their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <nlohmann/json.hpp>

#include "tests/models/hf_golden.h"
#include "tests/support/error_of.h"
#include "tests/support/recompute_modes.h"
#include "tidal/autograd/saved_tensor_log.h"
#include "tidal/ops/loss.h"
#include "tidal/ops/random.h"

namespace tidal::models {
namespace {

using Mode = testing::RecomputeMode;

const Mode kCsa{"csa", "", "", -1, false, -1, false, -1, "", true};
const Mode kMhc{"mhc", "", "", -1, false, -1, false, -1, "", false, true};
const Mode kBoth{"csa + mhc", "", "", -1, false, -1, false, -1, "", true, true};

std::string error_of(const Mode& m, const ModelConfig& c) {
  return testing::error_of([&] { m.parse(c); });
}

TEST(DeepseekV4RecomputeFlags, MindSpeedsRulesAreEnforced) {
  const ModelConfig llama = preset("tiny-llama");
  const ModelConfig sliding = load_pretrained_dir(fixture_dir("tiny_deepseek_v4")).config;  // sliding layers only
  const ModelConfig csa = load_pretrained_dir(fixture_dir("tiny_deepseek_v4_csa")).config;
  std::string e = error_of(kCsa, llama);
  EXPECT_NE(e.find("--recompute-csa-attention: the model (llama) has no compressed sparse attention"),
            std::string::npos)
      << e;
  e = error_of(kMhc, llama);
  EXPECT_NE(e.find("--mhc-recompute: the model (llama) has no manifold-constrained hyper-connections"),
            std::string::npos)
      << e;
  e = error_of(kCsa, sliding);
  EXPECT_NE(e.find("no compressed attention layer"), std::string::npos) << e;
  EXPECT_EQ(error_of(kMhc, sliding), "no error");  // every V4 layer has mHC
  e = error_of({"", "full", "uniform", 1, false, -1, false, -1, "", false, true}, csa);
  EXPECT_NE(e.find("--mhc-recompute with --recompute-granularity full needs --recompute-method block"),
            std::string::npos)
      << e;
  e = error_of({"", "full", "uniform", 1, false, -1, false, -1, "", true}, csa);
  EXPECT_NE(e.find("--recompute-csa-attention with --recompute-granularity full needs"), std::string::npos) << e;
  // What V4 still refuses is refused by name, next to the new flags too.
  e = error_of({"", "", "", -1, true, -1, false, -1, "", true, true}, csa);
  EXPECT_NE(e.find("--recompute-activation-function"), std::string::npos) << e;
  EXPECT_EQ(error_of({"", "full", "block", 2, false, -1, false, -1, "", true, true}, csa), "no error");
  // The compressed attention recomputed leaves the core-attn offload policy nothing there (as core_attn and full do).
  e = testing::error_of([&] {
    train::parse_memory_config({"--recompute-csa-attention", "--activation-offload", "--offload-policy", "core-attn"},
                               csa);
  });
  EXPECT_NE(e.find("--offload-policy core-attn has nothing to offload"), std::string::npos) << e;
  EXPECT_EQ(error_of({"", "selective", "", -1, false, -1, false, -1, "core_attn,moe", true, true}, csa), "no error");
}

// The plan: csa_attention on compressed layers only (HCA included), mhc on every layer, neither under full recompute;
// what --metrics-json and the flags say of it.
TEST(DeepseekV4RecomputeFlags, PlanDescriptionAndFlags) {
  const ModelConfig hca = load_pretrained_dir(fixture_dir("tiny_deepseek_v4_hca")).config;  // HCA, sliding, HCA
  const memory::RecomputeConfig both = kBoth.parse(hca);
  std::vector<LayerRecompute> plan = memory::plan_recompute(both, hca);
  for (int64_t l = 0; l < 3; ++l) {
    EXPECT_EQ(plan[size_t(l)].csa_attention, l != 1) << l;
    EXPECT_TRUE(plan[size_t(l)].mhc) << l;
  }
  EXPECT_EQ(both.describe(), "csa-attention + mhc");
  EXPECT_TRUE(both.to_json()["csa_attention"].get<bool>());
  EXPECT_TRUE(both.to_json()["mhc"].get<bool>());
  const nlohmann::json stats = memory::recompute_stats_json(both, plan, 0.0);
  EXPECT_EQ(stats["recomputed_layers"][0]["policies"], nlohmann::json({"csa_attention", "mhc"}));
  EXPECT_EQ(stats["recomputed_layers"][1]["policies"], nlohmann::json({"mhc"}));  // the sliding layer: mHC only
  memory::MemoryConfig mc;
  mc.set_recompute(both, hca);
  EXPECT_EQ(train::join_flags(train::memory_config_flags(mc)), "--recompute-csa-attention --mhc-recompute");
  EXPECT_EQ(train::parse_memory_config(train::memory_config_flags(mc), hca).recompute, both);

  const Mode block{"", "full", "block", 2, false, -1, false, -1, "", true, true};
  plan = memory::plan_recompute(block.parse(hca), hca);
  EXPECT_TRUE(plan[0].full && !plan[0].csa_attention && !plan[0].mhc);
  EXPECT_TRUE(plan[1].full && !plan[1].mhc);
  EXPECT_TRUE(!plan[2].full && plan[2].csa_attention && plan[2].mhc);
  EXPECT_EQ(block.parse(hca).describe(), "full block 2 + csa-attention + mhc");
}

// --report-memory's table: the pre mappings' intermediates recomputed (their input, the streams, kept), the
// mid-layer streams discarded, the compressed attention's tensors recomputed (its inputs kept), the sliding layer's
// attention untouched.
TEST(DeepseekV4RecomputeFlags, TheSavedTensorTableShowsWhatBecameOfEach) {
  const ModelConfig c = load_pretrained_dir(fixture_dir("tiny_deepseek_v4_hca")).config;  // HCA, sliding, HCA
  manual_seed(3);
  std::unique_ptr<CausalLM> model = create_model(c, nn::Init{});
  model->set_recompute(memory::plan_recompute(kBoth.parse(c), c));
  const Tensor ids = randint(0, c.vocab_size, {2, 17});
  std::vector<autograd::SavedTensorRecord> saved;
  Tensor loss;
  {
    autograd::SavedTensorLog log;
    loss = causal_lm_loss(model->forward(ids.narrow(1, 0, 16)), ids.narrow(1, 1, 16), 0.0);
    saved = log.snapshot();
  }
  loss.backward();
  auto policies = [&](const std::string& module, const std::string& op) {
    std::set<std::string> p;
    for (const autograd::SavedTensorRecord& r : saved)
      if (r.module == module && (op.empty() || r.op == op)) p.insert(r.policy);
    return p;
  };
  using Set = std::set<std::string>;
  for (const char* hc : {"model.layers.0.attn_hc", "model.layers.0.ffn_hc", "model.layers.1.attn_hc"}) {
    EXPECT_EQ(policies(hc, "sinkhorn"), Set{"recomputed"}) << hc;
    EXPECT_EQ(policies(hc, "linear"), Set{"recomputed"}) << hc;
  }
  EXPECT_EQ(policies("model.layers.0.attn_hc", "checkpoint_input"), Set{"kept"});      // the layer's streams
  EXPECT_EQ(policies("model.layers.0.ffn_hc", "checkpoint_input"), Set{"discarded"});  // the mid-layer streams
  EXPECT_EQ(policies("model.layers.0.self_attn.compressor", ""), Set{"recomputed"});
  EXPECT_EQ(policies("model.layers.0.self_attn", "softmax"), Set{"recomputed"});
  EXPECT_EQ(policies("model.layers.0.self_attn", "checkpoint_input"), Set{"kept"});
  EXPECT_EQ(policies("model.layers.1.self_attn", "softmax"), Set{"kept"});  // sliding: untouched
  EXPECT_EQ(policies("model.layers.1.self_attn", "checkpoint_input"), Set{});
}

}  // namespace
}  // namespace tidal::models
