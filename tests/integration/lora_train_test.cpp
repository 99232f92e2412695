// `tidal train --lora-*` (docs/finetuning.md): the frozen base never moves and has no gradients or
// optimizer states, checkpoints hold the base as a Hugging Face directory and the adapters as PEFT's
// files, a resume is bitwise, every memory feature trains the same adapters, the dry run counts it byte
// for byte, and tidal export --merge-lora / tidal generate read the result.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/integration/run_command.h"
#include "tests/integration/train_helpers.h"
#include "tests/support/gradcheck.h"
#include "tests/support/peaks_since.h"
#include "tidal/allocator.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/checkpoint/load.h"
#include "tidal/checkpoint/saved_model.h"
#include "tidal/io/safetensors.h"
#include "tidal/models/peft_adapter.h"
#include "tidal/models/pretrained.h"
#include "tidal/nn/lora.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"
#include "tidal/plan/dry_run.h"
#include "tidal/plan/step_peak.h"

namespace tidal::train {
namespace {

const std::string kQwen3 = std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/hf/tiny_qwen3";
const std::string kTidal = std::string(TIDAL_BINARY_DIR) + "/tidal";

// tiny-llama on mock data: 2 x 32 tokens per micro-batch, one per step, a constant learning rate.
std::vector<std::string> tiny_run(const std::vector<std::string>& more, int64_t iters = 3) {
  return constant_lr_run("tiny-llama", 2, "1e-2", iters, with({"--log-interval", "100"}, more));
}

// The same with adapters on q_proj and v_proj.
std::vector<std::string> lora_run(const std::vector<std::string>& more, int64_t iters = 3) {
  return tiny_run(with({"--lora-target-modules", "q_proj", "v_proj", "--lora-r", "4"}, more), iters);
}

std::map<std::string, Tensor> adapters_of(const std::string& save) {
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : checkpoint::load_checkpoint(save).model)
    if (nn::is_lora_parameter(name)) out.emplace(name, t);
  return out;
}

void expect_bitwise(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(testing::bitwise_equal(t, b.at(name))) << name;
}

TEST(LoraTrain, TheBaseStaysFrozenAndTheCheckpointIsAHfDirectoryWithAPeftAdapter) {
  const std::string save = fresh_dir("lora_qwen3");
  train({"--pretrained",
         kQwen3,
         "--mock-data",
         "--seq-length",
         "12",
         "--micro-batch-size",
         "2",
         "--train-iters",
         "3",
         "--lr",
         "1e-2",
         "--eval-interval",
         "0",
         "--log-interval",
         "100",
         "--lora-target-modules",
         "q_proj",
         "v_proj",
         "down_proj",
         "--lora-r",
         "4",
         "--lora-alpha",
         "8",
         "--save",
         save});
  const std::string iter = save + "/iter_0000003";
  // The base: bit for bit the model it started from, without an adapter tensor among it.
  const auto base = io::load_safetensors(iter + "/model.safetensors").tensors;
  const auto given = io::load_safetensors(kQwen3 + "/model.safetensors").tensors;
  ASSERT_EQ(base.size(), given.size());
  for (const auto& [name, t] : given) EXPECT_TRUE(testing::bitwise_equal(base.at(name), t)) << name;
  // The adapters as peft saves them, trained (B no longer zero).
  const models::AdapterFiles a = models::read_adapter_dir(iter);
  EXPECT_EQ(a.config.r, 4);
  EXPECT_EQ(a.config.alpha, 8.0);
  EXPECT_EQ(a.weights.size(), size_t(2 * 3 * 2));
  NoGradGuard no_grad;
  const Tensor b = a.weights.at("model.layers.1.mlp.down_proj.lora_B.weight");
  EXPECT_GT(sum(abs(b)).item<float>(), 0.0f);
  // The optimizer: the adapters' states alone.
  const auto opt = io::load_safetensors(iter + "/optimizer.safetensors").tensors;
  int states = 0;
  for (const auto& [name, t] : opt) {
    if (name.find("lora_") == std::string::npos) continue;
    ++states;
  }
  EXPECT_GT(states, 0);
  for (const auto& [name, t] : opt)
    if (t.numel() > 1) {
      EXPECT_NE(name.find("lora_"), std::string::npos) << name;
    }
}

TEST(LoraTrain, AResumeIsBitwise) {
  const std::string full = fresh_dir("lora_full"), part = fresh_dir("lora_part");
  train(lora_run({"--save", full}, 4));
  train(lora_run({"--save", part}, 2));
  train(lora_run({"--save", part, "--load", part}, 4));
  expect_bitwise(adapters_of(part), adapters_of(full));
}

TEST(LoraTrain, MemoryFeaturesTrainTheSameAdapters) {
  const std::string plain = fresh_dir("lora_plain");
  train(lora_run({"--save", plain}));
  const auto want = adapters_of(plain);
  std::vector<std::vector<std::string>> features = kBitwiseMemoryFeatures;
  features.push_back({"--recompute-granularity", "selective"});
  features.push_back({"--loss-compute-mode", "chunk", "--loss-chunk-size", "16"});
  for_each_feature(features, [&](const std::vector<std::string>& f) {
    const std::string dir = fresh_dir("lora_feature");
    train(lora_run(with(f, {"--save", dir})));
    expect_bitwise(adapters_of(dir), want);
  });
}

TEST(LoraTrain, Bf16TrainsTheAdaptersAlongTheF32Run) {
  const std::string dir = fresh_dir("lora_bf16");
  const TrainResult r = train(lora_run({"--bf16", "--save", dir}, 6));
  const TrainResult f32 = train(lora_run({}, 6));
  ASSERT_EQ(r.losses.size(), size_t(6));
  for (size_t i = 0; i < r.losses.size(); ++i) EXPECT_NEAR(r.losses[i], f32.losses[i], 0.02) << "step " << i;
  EXPECT_NE(r.losses.back(), r.losses.front());
  const auto opt = io::load_safetensors(dir + "/iter_0000006/optimizer.safetensors").tensors;
  for (const auto& [name, t] : opt)
    if (t.numel() > 1) {
      EXPECT_NE(name.find("lora_"), std::string::npos) << name;
    }
}

// The dry run allocates what the run does, and the optimizer's states are the adapters' 2 x 4 bytes each.
TEST(LoraTrain, TheDryRunIsExactAndStatesAreTheAdaptersOnly) {
  for (const std::vector<std::string>& f : std::vector<std::vector<std::string>>{
           {},
           {"--bf16"},
           {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"}}) {
    const std::vector<std::string> flags = lora_run(f, 2);
    const plan::DryRun dry = plan::dry_run(parse_train_args(flags));
    Allocator& cpu = device_allocator(Device::cpu());
    const MemoryStats before = cpu.stats();
    train(flags);
    testing::expect_same_peaks(dry.device, testing::peaks_since(before, cpu.stats()), "device");
    auto model = models::create_model(models::preset("tiny-llama"));
    nn::LoraConfig c;
    c.target_modules = {"q_proj", "v_proj"};
    c.r = 4;
    nn::apply_lora(*model, c, nn::Init{});
    int64_t trained = 0;
    for (const auto& [name, p] : model->named_trainable_parameters()) trained += p.numel();
    const bool bf16 = !f.empty() && f[0] == "--bf16";  // and f32 master weights of the adapters
    EXPECT_EQ(dry.device[MemoryCategory::optimizer_state].peak, trained * 8 + (bf16 ? trained * 4 : 0));
  }
}

// The planner's prediction (plan/step_peak.h) knows LoRA: the parameters (the frozen base and the adapters)
// and AdamW's states (the adapters' alone, sharded over 4 ranks with ZeRO-1) are the dry run's to the byte.
// Its activations are full fine-tuning's estimate, which counts inputs a frozen layer without an adapter
// does not keep (measured: 12% above the dry run's peak here, in f32); the planner's candidates are checked
// by dry runs.
TEST(LoraTrain, ThePlannerPredictsTheFrozenBase) {
  for (const std::vector<std::string>& f :
       std::vector<std::vector<std::string>>{{},
                                             {"--bf16"},
                                             {"--use-distributed-optimizer"},
                                             {"--data-parallel-sharding-strategy", "optim_grads_params"},
                                             {"--lora-target-modules", "all-linear"}}) {
    SCOPED_TRACE(f.empty() ? "plain" : f.back());
    const bool sharded = f == std::vector<std::string>{"--use-distributed-optimizer"} ||
                         f == std::vector<std::string>{"--data-parallel-sharding-strategy", "optim_grads_params"};
    TrainArgs a = parse_train_args(lora_run(f, 2));
    if (sharded) a.global_batch_size = 8;  // 4 ranks x 2
    a = a.on(sharded ? 4 : 1);
    const plan::DryRun dry = plan::dry_run_largest_rank(a);
    const plan::StepPeak p = plan::predict_step_peak(a.model, plan::triage_settings(a));
    EXPECT_EQ(dry.device[MemoryCategory::parameter].peak, p.parameters);
    EXPECT_EQ(dry.device[MemoryCategory::optimizer_state].peak, p.optimizer_states);
    // The estimator counts what the frozen base does not keep (memory/estimator.h): within 2% in f32. Under --bf16 a
    // temporary of about the (tiny) model's size that the estimator does not model puts the dry run 18% above it, as
    // it puts a full fine-tune's 7% above; under ZeRO-3 a temporary during backward (280 KiB at the peak, about a
    // layer's gathered parameters and the logits' gradient) puts it 6.5% above. Neither is understood yet.
    const double ratio = double(dry.device.peak_allocated) / double(p.total);
    const bool bf16 = f == std::vector<std::string>{"--bf16"};
    const bool zero3 = f.size() == 2 && f[1] == "optim_grads_params";
    EXPECT_GT(ratio, 0.98) << dry.device.peak_allocated << " vs " << p.total;
    EXPECT_LT(ratio, bf16 ? 1.2 : zero3 ? 1.08 : 1.02) << dry.device.peak_allocated << " vs " << p.total;
  }
}

TEST(LoraTrain, FlagsAndResumesAUserCanGetWrong) {
  EXPECT_NE(
      message({"--mock-data", "--model", "tiny-llama", "--lora-r", "8"}).find("--lora-r needs --lora-target-modules"),
      std::string::npos);
  const std::string dir = fresh_dir("lora_resume_errors");
  train(lora_run({"--save", dir}, 2));
  EXPECT_NE(testing::error_of([&] { train(tiny_run({"--load", dir})); }).find("is a LoRA run's"), std::string::npos);
  const std::string full = fresh_dir("lora_full_ckpt");
  train(tiny_run({"--save", full}));
  EXPECT_NE(testing::error_of([&] {
              train(lora_run({"--load", full}, 4));
            }).find("was saved without LoRA"),
            std::string::npos);
}

TEST(LoraTrain, ExportMergesAndGenerateReadsTheAdapters) {
  const std::string dir = fresh_dir("lora_export");
  train(lora_run({"--save", dir}, 4));
  const std::string out = dir + "/merged";
  testing::CommandResult r = testing::run_command(kTidal + " export --load " + dir + " --output " + out);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("add --merge-lora"), std::string::npos) << r.output;
  r = testing::run_command(kTidal + " export --load " + dir + " --output " + out + " --merge-lora");
  ASSERT_EQ(r.code, 0) << r.output;
  NoGradGuard no_grad;
  const checkpoint::SavedModel adapted = checkpoint::load_saved_model(dir, "", Device::cpu());
  ASSERT_TRUE(adapted.lora);
  const auto merged = models::load_pretrained_model(out);
  manual_seed(5);
  const Tensor ids = randint(0, merged->config().vocab_size, {2, 16});
  const Tensor want = adapted.model->forward(ids).logits;
  EXPECT_TRUE(testing::all_close(merged->forward(ids).logits, want, 1e-4, 1e-5));
  // The base alone differs: the adapters were trained and the export kept them.
  const auto base = models::load_pretrained_model(dir + "/iter_0000004");
  EXPECT_FALSE(testing::all_close(base->forward(ids).logits, want, 1e-4, 1e-5));
}

}  // namespace
}  // namespace tidal::train
