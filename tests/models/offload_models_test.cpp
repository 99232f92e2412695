// Activation offload on the real models: every policy and tier, alone and with recompute, over two
// accumulated micro-batches, gives bitwise the gradients of keeping everything; and the measured
// device peak of activations and the offloaded bytes are exactly what the estimator predicts — with
// f32 parameters and with bf16 ones (--bf16's model: bf16 activations, f32 statistics).
#include <gtest/gtest.h>

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include "tests/support/gradcheck.h"
#include "tests/support/recompute_modes.h"
#include "tests/support/test_models.h"
#include "tidal/memory/estimator.h"
#include "tidal/memory/offload.h"
#include "tidal/memory/offload_runner.h"
#include "tidal/models/causal_lm.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"

namespace tidal::models {
namespace {

using Mode = testing::RecomputeMode;

struct Setup {
  std::string policy;
  memory::OffloadTarget target = memory::OffloadTarget::host;
  int depth = 1;
};

// Installs the offload blocks; records each sparse layer's routing (tokens per expert) of the first
// micro-batch into `routed`, for the estimator.
void install(CausalLM& model, memory::Offloader& off, const std::vector<memory::LayerRecompute>& plan,
             const std::string& policy, std::vector<std::vector<int64_t>>& routed) {
  const int64_t layers = model.config().num_hidden_layers;
  routed.assign(size_t(layers), {});
  model.set_layer_runner(memory::offload_layer_runner(
      off, plan, layers, memory::parse_offload_policy(policy),
      [&routed](int64_t i, const LayerFn& fn, const std::vector<Tensor>& in) {
        std::vector<Tensor> out = fn(in);
        if (out.size() == 3 && routed[size_t(i)].empty()) {  // {x, prob_sum, top-k counts (k, E)}
          for (const float n : sum(out[2], {0}).to_vector<float>()) routed[size_t(i)].push_back(int64_t(n));
        }
        return out;
      }));
}

struct Trained {
  std::vector<Tensor> grads;
  int64_t peak = 0;       // device activation bytes, first micro-batch
  int64_t offloaded = 0;  // bytes offloaded in the first micro-batch
};

Trained run(CausalLM& model, const Tensor& batch, memory::Offloader* off) {
  Allocator& dev = device_allocator(Device::cpu());
  Trained r;
  for (int64_t mb = 0; mb < 2; ++mb) {
    Tensor tokens = batch.narrow(0, mb * 2, 2);
    const int64_t t = tokens.size(1) - 1;
    Tensor ids = tokens.narrow(1, 0, t).contiguous(), targets = tokens.narrow(1, 1, t).contiguous();
    if (off != nullptr) off->begin_micro_batch();
    manual_seed(50 + uint64_t(mb));
    const int64_t base = dev.stats()[MemoryCategory::activation].allocated;
    dev.reset_peak_stats();
    {
      Tensor loss = causal_lm_loss(model.forward(ids), targets, model.config().router_aux_loss_coef);
      mul(loss, 0.5).backward();
    }
    if (mb == 0) r.peak = dev.stats()[MemoryCategory::activation].peak - base;
    if (mb == 0 && off != nullptr) r.offloaded = off->stats().offloaded_bytes;
  }
  for (const Tensor& p : model.parameters()) r.grads.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  model.zero_grad();
  return r;
}

void check(const char* preset_name, AttentionKernel kernel, DType dtype = DType::f32) {
  auto model = testing::make_test_model(preset_name, 4, kernel, dtype);
  const ModelConfig& c = model->config();
  manual_seed(2);
  Tensor batch = randint(0, c.vocab_size, {4, 33});
  const Trained plain = run(*model, batch, nullptr);
  std::vector<std::pair<Mode, Setup>> cases = {
      {{"none"}, {"all"}},
      {{"none"}, {"layer-input", memory::OffloadTarget::disk}},
      {{"none"}, {"min-bytes=16384", memory::OffloadTarget::host, 0}},
      {{"none"}, {"min-bytes=4096"}},  // MoE: takes some experts' tensors and not others
      {{"none"}, {"core-attn", memory::OffloadTarget::host, 2}},
      {{"full uniform 1", "full", "uniform", 1}, {"layer-input"}},
      {{"full uniform 2", "full", "uniform", 2}, {"all", memory::OffloadTarget::disk}},
      {{"full block 1 + activation", "full", "block", 1, true}, {"all"}},
      {{"activation + norm", "", "", -1, true, -1, true}, {"all", memory::OffloadTarget::host, 2}},
  };
  if (c.is_mla()) {  // MLA's up-projections recomputed: their outputs are neither kept nor offloaded
    const Mode up{"modules mla_up_proj,norm", "", "", -1, false, -1, false, -1, "mla_up_proj,norm"};
    cases.push_back({up, {"all"}});
    cases.push_back({up, {"core-attn", memory::OffloadTarget::host, 2}});
  }
  for (const auto& [mode, setup] : cases) {
    if (setup.policy == "core-attn" && kernel != AttentionKernel::eager) continue;
    const std::vector<memory::LayerRecompute> plan =
        mode.name == "none" ? std::vector<memory::LayerRecompute>{} : memory::plan_recompute(mode.parse(c), c);
    model->set_recompute(plan);
    memory::OffloadOptions o;
    o.target = setup.target;
    o.dir = ::testing::TempDir();
    o.prefetch_depth = setup.depth;
    memory::Offloader off(o);
    std::vector<std::vector<int64_t>> routed;
    install(*model, off, plan, setup.policy, routed);
    const Trained r = run(*model, batch, &off);
    model->set_layer_runner(nullptr);
    model->set_recompute({});
    const std::string what = std::string(preset_name) + " " + mode.name + " + offload " + setup.policy +
                             (setup.target == memory::OffloadTarget::disk ? " to disk" : " to host");
    for (size_t i = 0; i < plain.grads.size(); ++i) {
      ASSERT_EQ(plain.grads[i].defined(), r.grads[i].defined()) << what << " param " << i;
      if (plain.grads[i].defined()) {
        EXPECT_TRUE(testing::bitwise_equal(r.grads[i], plain.grads[i])) << what << " param " << i;
      }
    }
    EXPECT_GT(r.offloaded, 0) << what;
    memory::ActivationInputs in;
    in.dtype = dtype;
    in.batch = 2;
    in.seq = 32;
    in.kernel = kernel;
    in.plan = plan;
    in.offload_policy = memory::parse_offload_policy(setup.policy);
    in.offload_prefetch_depth = setup.depth;
    in.expert_tokens = routed;
    const memory::ActivationEstimate est = memory::estimate_activations(c, in);
    EXPECT_EQ(est.peak, r.peak) << what << ": predicted peak at " << est.peak_at;
    EXPECT_EQ(r.offloaded, est.offloaded_per_step) << what;
  }
}

}  // namespace

TEST(OffloadModels, Gpt2Eager) { check("tiny-gpt2", AttentionKernel::eager); }
TEST(OffloadModels, LlamaFlash) { check("tiny-llama", AttentionKernel::flash); }
TEST(OffloadModels, LlamaEager) { check("tiny-llama", AttentionKernel::eager); }
TEST(OffloadModels, Qwen3MoeFlash) { check("tiny-qwen3-moe", AttentionKernel::flash); }
TEST(OffloadModels, MistralFlash) { check("tiny-mistral", AttentionKernel::flash); }
TEST(OffloadModels, Qwen2Eager) { check("tiny-qwen2", AttentionKernel::eager); }
TEST(OffloadModels, Gemma3Flash) { check("tiny-gemma3", AttentionKernel::flash); }
TEST(OffloadModels, DeepseekV3Flash) { check("tiny-deepseek-v3", AttentionKernel::flash); }
TEST(OffloadModels, DeepseekV3Eager) { check("tiny-deepseek-v3", AttentionKernel::eager); }
TEST(OffloadModels, Bf16Gpt2Eager) { check("tiny-gpt2", AttentionKernel::eager, DType::bf16); }
TEST(OffloadModels, Bf16Gpt2Flash) { check("tiny-gpt2", AttentionKernel::flash, DType::bf16); }
TEST(OffloadModels, Bf16LlamaEager) { check("tiny-llama", AttentionKernel::eager, DType::bf16); }
TEST(OffloadModels, Bf16Qwen3MoeFlash) { check("tiny-qwen3-moe", AttentionKernel::flash, DType::bf16); }

// The example: full uniform 1 keeps one input per layer; offloading those inputs leaves about
// two on the device (the last block's, and the one prefetched for it) instead of L.
TEST(OffloadModels, FullUniformOneWithLayerInputKeepsTwoLayerInputs) {
  const int64_t layers = 8;
  auto model = testing::make_test_model("tiny-llama", layers, AttentionKernel::flash);
  const ModelConfig& c = model->config();
  manual_seed(2);
  Tensor batch = randint(0, c.vocab_size, {4, 33});
  const std::vector<memory::LayerRecompute> plan =
      memory::plan_recompute(Mode{"full uniform 1", "full", "uniform", 1}.parse(c), c);
  model->set_recompute(plan);
  const Trained recompute_only = run(*model, batch, nullptr);
  memory::Offloader off;
  std::vector<std::vector<int64_t>> routed;
  install(*model, off, plan, "layer-input", routed);
  const Trained offloaded = run(*model, batch, &off);
  model->set_layer_runner(nullptr);
  const int64_t input = 2 * 32 * c.hidden_size * 4;  // one layer input, (2, 32, h) f32
  EXPECT_EQ(offloaded.offloaded, (layers - 1) * input);
  EXPECT_EQ(recompute_only.peak - offloaded.peak, (layers - 2) * input);
}

}  // namespace tidal::models
