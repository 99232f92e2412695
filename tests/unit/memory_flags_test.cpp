// The memory flags and the typed configuration (tidal/train/memory_flags.h): flags(config) parses back
// to the same config for every combination of the features, and the errors name the flag typed.
#include <gtest/gtest.h>

#include "tests/support/error_of.h"
#include "tidal/models/pretrained.h"
#include "tidal/train/memory_flags.h"

namespace tidal::train {
namespace {

using memory::Granularity;
using memory::MemoryConfig;
using memory::OffloadPolicyKind;
using memory::RecomputeMethod;
using memory::RecomputeModule;
using testing::error_of;

// Every recompute configuration the rules accept for `model`, from the combinations of each field.
std::vector<memory::RecomputeConfig> valid_recompute(const models::ModelConfig& model) {
  const std::vector<std::vector<RecomputeModule>> module_lists = {
      {},
      {RecomputeModule::core_attn},
      {RecomputeModule::mlp},
      {RecomputeModule::norm},
      {RecomputeModule::moe_act},
      {RecomputeModule::moe},
      {RecomputeModule::mlp, RecomputeModule::core_attn},
      {RecomputeModule::core_attn, RecomputeModule::mlp, RecomputeModule::norm, RecomputeModule::moe_act,
       RecomputeModule::moe}};
  const std::vector<std::pair<bool, int64_t>> finer = {{false, -1}, {true, -1}, {true, 0}, {true, 1}};
  std::vector<memory::RecomputeConfig> out;
  for (const Granularity g : {Granularity::none, Granularity::full, Granularity::selective})
    for (const RecomputeMethod m : {RecomputeMethod::none, RecomputeMethod::uniform, RecomputeMethod::block})
      for (const int64_t n : {-1, 1, 2, 3})
        for (const std::vector<RecomputeModule>& modules : module_lists)
          for (const auto& [act, act_n] : finer)
            for (const auto& [norm, norm_n] : finer)
              for (const int v4 : {0, 1, 2, 3}) {  // --recompute-csa-attention, --mhc-recompute
                memory::RecomputeConfig c;
                c.granularity = g;
                c.method = m;
                c.num_layers = n;
                c.modules = modules;
                c.activation_function = act;
                c.activation_num_layers = act_n;
                c.norm = norm;
                c.norm_num_layers = norm_n;
                c.csa_attention = v4 & 1;
                c.mhc = v4 & 2;
                try {
                  memory::validate_recompute(c, model);
                } catch (const Error&) {
                  continue;
                }
                out.push_back(c);
              }
  return out;
}

std::vector<memory::OffloadConfig> offload_choices() {
  std::vector<memory::OffloadConfig> out = {{}};  // off
  for (const memory::OffloadPolicy policy :
       {memory::OffloadPolicy{OffloadPolicyKind::all}, memory::OffloadPolicy{OffloadPolicyKind::layer_input},
        memory::OffloadPolicy{OffloadPolicyKind::core_attn}, memory::OffloadPolicy{OffloadPolicyKind::min_bytes, 0},
        memory::OffloadPolicy{OffloadPolicyKind::min_bytes, 16384}})
    for (const memory::OffloadTarget target : {memory::OffloadTarget::host, memory::OffloadTarget::disk})
      for (const int64_t depth : {0, 1, 3})
        for (const int64_t host_limit : {int64_t(0), int64_t(3) << 30}) {
          const bool disk = target == memory::OffloadTarget::disk;
          if (disk && host_limit > 0) continue;  // the cap is for the host tier
          out.push_back({true, policy, target, disk ? "/tmp/spill here" : "", depth, host_limit});
        }
  return out;
}

TEST(MemoryFlags, ParsingTheFlagsOfAConfigGivesItBackForEveryCombination) {
  models::ModelConfig llama = models::preset("tiny-llama");
  llama.num_hidden_layers = 3;
  const std::vector<memory::LossComputeConfig> losses = {{}, {true, 1024}, {true, 7}};
  const std::vector<memory::SwapOptimizerConfig> swaps = {{}, {true, -1}, {true, 1}, {true, 16}};
  int64_t checked = 0;
  const models::ModelConfig v4 =
      models::load_pretrained_dir(TIDAL_SOURCE_DIR "/tests/fixtures/hf/tiny_deepseek_v4_csa").config;
  for (const models::ModelConfig& model : {llama, models::preset("tiny-qwen3-moe"), v4}) {
    const std::vector<memory::RecomputeConfig> recomputes = valid_recompute(model);
    EXPECT_GT(recomputes.size(), model.is_deepseek_v4() ? 20u : 40u)
        << model.model_type;  // V4 refuses norm, moe_act, ...
    for (const memory::RecomputeConfig& rc : recomputes) {
      MemoryConfig base;
      base.set_recompute(rc, model);
      bool attn_recomputed = false;  // --offload-policy core-attn would have nothing to offload
      for (const memory::LayerRecompute& p : base.recompute_plan)
        attn_recomputed |= p.full || p.core_attn || p.csa_attention;
      for (const memory::OffloadConfig& offload : offload_choices()) {
        if (attn_recomputed && offload.enabled && offload.policy.kind == OffloadPolicyKind::core_attn) continue;
        for (const memory::LossComputeConfig& loss : losses)
          for (const memory::SwapOptimizerConfig& swap : swaps) {
            MemoryConfig c = base;
            c.offload = offload;
            c.loss = loss;
            c.swap_optimizer = swap;
            const std::vector<std::string> flags = memory_config_flags(c);
            MemoryConfig back;
            ASSERT_NO_THROW(back = parse_memory_config(flags, model)) << join_flags(flags);
            ASSERT_TRUE(back == c) << join_flags(flags) << " on " << model.model_type;
            ++checked;
          }
      }
    }
  }
  EXPECT_GT(checked, 10000);
}

TEST(MemoryFlags, TheFlagsAreTheOnesUsersType) {
  const models::ModelConfig m = models::preset("tiny-qwen3-moe");
  EXPECT_TRUE(memory_config_flags({}).empty());
  EXPECT_EQ(join_flags(memory_config_flags(parse_memory_config({"--recompute-granularity", "selective"}, m))),
            "--recompute-granularity selective");
  EXPECT_EQ(join_flags(memory_config_flags(parse_memory_config({"--recompute-modules", "mlp, moe"}, m))),
            "--recompute-modules mlp,moe");
  const std::vector<std::string> all = {"--recompute-granularity",
                                        "full",
                                        "--recompute-method",
                                        "block",
                                        "--recompute-num-layers",
                                        "1",
                                        "--recompute-activation-function",
                                        "--recompute-norm",
                                        "--recompute-norm-num-layers",
                                        "1",
                                        "--activation-offload",
                                        "--offload-policy",
                                        "min-bytes=4096",
                                        "--offload-target",
                                        "disk",
                                        "--offload-dir",
                                        "/tmp/a dir",
                                        "--offload-prefetch-depth",
                                        "2",
                                        "--loss-compute-mode",
                                        "chunk",
                                        "--loss-chunk-size",
                                        "64",
                                        "--swap-optimizer",
                                        "--swap-optimizer-times",
                                        "4"};
  const MemoryConfig c = parse_memory_config(all, m);
  EXPECT_EQ(memory_config_flags(c), all);
  EXPECT_EQ(join_flags(memory_config_flags(c)).find("--offload-dir '/tmp/a dir'") != std::string::npos, true);
  EXPECT_EQ(c.offload.policy, (memory::OffloadPolicy{OffloadPolicyKind::min_bytes, 4096}));
  EXPECT_EQ(c.offload.describe(), "min-bytes=4096 to disk");
  EXPECT_EQ(c.recompute_plan.size(), 2u);
  // The policy is always spelled out, as are the chunk size and a given window count.
  EXPECT_EQ(join_flags(memory_config_flags(
                parse_memory_config({"--activation-offload", "--loss-compute-mode", "chunk", "--swap-optimizer"}, m))),
            "--activation-offload --offload-policy all --loss-compute-mode chunk --loss-chunk-size 1024 "
            "--swap-optimizer");
}

TEST(MemoryFlags, ErrorsNameTheFlagTyped) {
  const models::ModelConfig m = models::preset("tiny-llama");
  auto error = [&](const std::vector<std::string>& flags) { return error_of([&] { parse_memory_config(flags, m); }); };
  EXPECT_NE(error({"--activation-offload", "--offload-policy", "most"}).find("--offload-policy"), std::string::npos);
  EXPECT_NE(error({"--activation-offload", "--offload-policy", "most"}).find("valid are"), std::string::npos);
  EXPECT_NE(error({"--activation-offload", "--offload-policy", "min-bytes=lots"}).find("--offload-policy"),
            std::string::npos);
  EXPECT_NE(error({"--activation-offload", "--offload-policy", "min-bytes=-1"}).find("byte count"), std::string::npos);
  EXPECT_NE(error({"--activation-offload", "--offload-target", "gpu"}).find("--offload-target must be host or disk"),
            std::string::npos);
  EXPECT_NE(error({"--recompute-granularity", "most"}).find("--recompute-granularity must be full or selective"),
            std::string::npos);
  EXPECT_NE(error({"--recompute-method", "all"}).find("--recompute-method must be uniform or block"),
            std::string::npos);
  EXPECT_NE(error({"--recompute-modules", "mlp,attention"}).find("--recompute-modules: unknown module 'attention'"),
            std::string::npos);
  EXPECT_NE(error({"--loss-compute-mode", "chunked"}).find("--loss-compute-mode must be default or chunk"),
            std::string::npos);
  EXPECT_NE(error({"--offload-prefetch-depth", "2"}).find("--offload-prefetch-depth needs --activation-offload"),
            std::string::npos);
  EXPECT_THROW(memory::parse_offload_policy("most"), Error);
  EXPECT_THROW(memory::parse_offload_policy("min-bytes="), Error);
  EXPECT_EQ(memory::parse_offload_policy("core-attn"), memory::OffloadPolicy{OffloadPolicyKind::core_attn});
}

}  // namespace
}  // namespace tidal::train
