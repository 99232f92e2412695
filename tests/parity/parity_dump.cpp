// tidal_parity_dump PRESET DIR [key=value ...]: everything tests/parity/reference.py needs to check one tiny preset
// against an independent PyTorch implementation (see docs/parity.md):
//   config.json          the model's Hugging Face config
//   weights.safetensors  the seeded initial weights
//   batch.safetensors    "tokens" (2, 17) i64 and the training batches "train.0" .. "train.9"
//   outputs.safetensors  "logits" (flash attention), "logits_eager" (eager attention), "logits_bf16"
//                        (f32 copy of the --bf16 model's: the same draws rounded to bf16), "loss",
//                        "aux_loss" (MoE), "grad.<name>" of every parameter that got a gradient after
//                        one backward of causal_lm_loss(aux coef = router_aux_loss_coef); then of 10
//                        AdamW steps (lr 1e-3, weight decay 0.01 on matrices, clip 1.0):
//                        "train_losses" (10) and "grad_norms" (10) f64, and "final.<name>" weights;
//                        metadata "no_decay" and "skipped" (step:name of parameters without gradient).
// tidal_parity_dump --logits CKPT TOKENS OUT: the logits (f32) of a `tidal train --save` checkpoint (its
// latest iteration) on TOKENS' "tokens" (B, T) i64, computed in the dtype config.json's torch_dtype
// names (bf16 weights and activations for "bfloat16"), written to OUT as "logits" (B, T, V) f32 —
// scripts/hf_interop.py compares them with Hugging Face transformers' (docs/interop.md).
// tidal_parity_dump --logits-f32 CKPT TOKENS OUT: the same with the weights widened to f32 (exact) and
// an f32 forward: a bf16 checkpoint checked at f32's tolerance.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tidal/autograd/grad_mode.h"
#include "tidal/checkpoint/load.h"
#include "tidal/io/atomic_file.h"
#include "tidal/io/safetensors.h"
#include "tidal/models/causal_lm.h"
#include "tidal/ops/random.h"
#include "tidal/optim/adamw.h"
#include "tidal/optim/grad_clip.h"

namespace {

using namespace tidal;
using namespace tidal::models;

constexpr uint64_t kModelSeed = 1234;
constexpr uint64_t kBatchSeed = 4321;
constexpr int kTrainSteps = 10;
constexpr double kLr = 1e-3;
constexpr double kWeightDecay = 0.01;
constexpr double kClip = 1.0;
constexpr int kSkipStep = 3;

// Loss of next-token prediction on tokens (B, T+1).
Tensor loss_of(const CausalLM& model, const Tensor& tokens, ModelOutput* out = nullptr) {
  const int64_t t = tokens.size(1) - 1;
  ModelOutput o = model.forward(tokens.narrow(1, 0, t));
  Tensor loss = causal_lm_loss(o, tokens.narrow(1, 1, t), model.config().router_aux_loss_coef);
  if (out != nullptr) *out = o;
  return loss;
}

// The preset's config with `overrides` ("key=<JSON value>", config.json names) applied.
ModelConfig config_of(const std::string& name, const std::vector<std::string>& overrides) {
  nlohmann::json j = config_to_json(preset(name));
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    TIDAL_CHECK(eq != std::string::npos && eq > 0, "override '", o, "' is not key=value");
    j[o.substr(0, eq)] = nlohmann::json::parse(o.substr(eq + 1));
  }
  return config_from_json(j);
}

void dump(const std::string& name, const std::string& dir, const std::vector<std::string>& overrides) {
  std::filesystem::create_directories(dir);
  manual_seed(kModelSeed);
  std::unique_ptr<CausalLM> model = create_model(config_of(name, overrides));
  model->train(false);  // the tiny presets have no dropout; eval mode makes sure
  const ModelConfig& c = model->config();
  const std::string config = config_to_json(c).dump(2);
  io::write_atomically(dir + "/config.json",
                       [&](int fd) { io::write_all(fd, config.data(), config.size(), dir + "/config.json"); });
  io::save_safetensors(dir + "/weights.safetensors", model->state_dict(), {{"format", "pt"}});

  manual_seed(kBatchSeed);
  std::map<std::string, Tensor> batch;
  for (int i = 0; i < kTrainSteps; ++i) batch["train." + std::to_string(i)] = randint(0, c.vocab_size, {2, 17});
  // One batch of a single repeated token: every position has the same hidden state, so all tokens
  // pick the same top-k experts and the other experts get no gradient; AdamW must skip them exactly
  // as PyTorch does (their step counts then lag behind the others').
  batch["train." + std::to_string(kSkipStep)] = full({2, 17}, 7.0, DType::i64);
  batch["tokens"] = batch["train.0"];
  io::save_safetensors(dir + "/batch.safetensors", batch);

  std::map<std::string, Tensor> out;
  ModelOutput fwd;
  Tensor loss = loss_of(*model, batch["tokens"], &fwd);
  loss.backward();
  out["logits"] = fwd.logits.detach();
  out["loss"] = loss.detach();
  if (fwd.aux_loss.defined()) out["aux_loss"] = fwd.aux_loss.detach();
  for (auto& [pname, p] : model->named_parameters())
    if (p.grad().defined()) out["grad." + pname] = p.grad();  // experts nobody chose have none
  model->zero_grad();
  {
    NoGradGuard no_grad;
    model->set_attention_kernel(AttentionKernel::eager);
    out["logits_eager"] = model->forward(batch["tokens"].narrow(1, 0, 16)).logits;
    model->set_attention_kernel(AttentionKernel::flash);
  }

  {  // The --bf16 model: each weight drawn in f32 as above, then rounded to bf16 (train/setup.cpp).
    manual_seed(kModelSeed);
    nn::Init bf16;
    bf16.dtype = DType::bf16;
    std::unique_ptr<CausalLM> m16 = create_model(c, bf16);
    m16->train(false);
    NoGradGuard no_grad;
    out["logits_bf16"] = m16->forward(batch["tokens"].narrow(1, 0, 16)).logits.to(DType::f32);
  }

  optim::AdamW adam(model->named_parameters(), {.lr = kLr, .weight_decay = kWeightDecay});
  // Comma-separated lists, built with append (GCC 12's -Wrestrict misfires on chains of operator+).
  auto add_to = [](std::string& list, const std::string& item) {
    if (!list.empty()) list.append(",");
    list.append(item);
  };
  std::string no_decay, skipped;
  for (auto& [pname, p] : model->named_parameters())
    if (!adam.decays(pname)) add_to(no_decay, pname);
  std::vector<double> losses, norms;
  for (int i = 0; i < kTrainSteps; ++i) {
    Tensor l = loss_of(*model, batch["train." + std::to_string(i)]);
    l.backward();
    for (auto& [pname, p] : model->named_parameters())
      if (!p.grad().defined()) add_to(skipped, std::to_string(i).append(":").append(pname));
    losses.push_back(l.item<double>());
    norms.push_back(optim::clip_grad_norm(model->parameters(), kClip));
    adam.step(kLr);
    adam.zero_grad();
  }
  out["train_losses"] = from_vector(losses, {kTrainSteps}, DType::f64);
  out["grad_norms"] = from_vector(norms, {kTrainSteps}, DType::f64);
  for (auto& [pname, p] : model->named_parameters()) out["final." + pname] = p.detach();
  // Which parameters tidal exempts from weight decay, and which it skipped (no gradient) at which step.
  io::save_safetensors(dir + "/outputs.safetensors", out, {{"no_decay", no_decay}, {"skipped", skipped}});
  std::printf("%s: loss %.6f, after %d AdamW steps %.6f -> %s\n", name.c_str(), losses.front(), kTrainSteps,
              losses.back(), dir.c_str());
}

// The --logits modes: the checkpoint's model in its saved dtype (or in f32: `widen`), one no-grad
// forward of "tokens".
void dump_checkpoint_logits(const std::string& ckpt, const std::string& tokens_file, const std::string& out,
                            bool widen) {
  TIDAL_CHECK(checkpoint::latest_iteration(ckpt) >= 0, ckpt,
              " has no checkpoint (give a tidal train --save directory)");
  checkpoint::Checkpoint ck = checkpoint::load_checkpoint(ckpt);
  const ModelConfig config = checkpoint::model_config_of(ck);  // with a --mtp-num-layers run's depths
  nn::Init init;
  init.dtype = config.torch_dtype == "bfloat16" && !widen ? DType::bf16 : DType::f32;
  std::unique_ptr<CausalLM> model = create_model(config, init);
  for (auto& [name, t] : ck.model) t = t.to(init.dtype);
  model->load_state_dict(ck.model);
  model->train(false);
  const std::map<std::string, Tensor> in = io::load_safetensors(tokens_file).tensors;
  TIDAL_CHECK(in.count("tokens") == 1, tokens_file, " has no tensor \"tokens\"");
  NoGradGuard no_grad;
  const Tensor logits = model->forward(in.at("tokens")).logits.to(DType::f32);
  io::save_safetensors(out, {{"logits", logits}});
  std::printf("%s (%s, computed in %s): logits -> %s\n", ck.path.c_str(), config.torch_dtype.c_str(),
              widen ? "f32" : config.torch_dtype.c_str(), out.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s PRESET DIR [key=value ...]   (e.g. tiny-llama /tmp/parity/tiny-llama "
                 "attention_bias=true: config.json fields override the preset's)\n",
                 argv[0]);
    return 2;
  }
  try {
    if (const std::string mode = argv[1]; mode == "--logits" || mode == "--logits-f32") {
      TIDAL_CHECK(argc == 5, "usage: tidal_parity_dump ", mode, " CHECKPOINT_DIR TOKENS.safetensors OUT.safetensors");
      dump_checkpoint_logits(argv[2], argv[3], argv[4], mode == "--logits-f32");
      return 0;
    }
    dump(argv[1], argv[2], std::vector<std::string>(argv + 3, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tidal_parity_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
