// The model zoo: every tiny preset builds, runs forward and backward, with recompute giving the same
// gradients bit for bit, on cpu and on meta, and round-trips through safetensors.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/gradcheck.h"
#include "tidal/autograd/checkpoint.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/io/safetensors.h"
#include "tidal/models/causal_lm.h"
#include "tidal/models/pretrained.h"
#include "tidal/ops/random.h"

namespace tidal::models {
namespace {

const char* kTiny[] = {"tiny-gpt2",    "tiny-llama", "tiny-qwen3",  "tiny-qwen3-moe",
                       "tiny-mistral", "tiny-qwen2", "tiny-gemma3", "tiny-deepseek-v3"};

std::unique_ptr<CausalLM> tiny(const std::string& name, uint64_t seed = 1) {
  manual_seed(seed);
  return create_model(preset(name));
}

// Loss and gradients of one batch.
struct Step {
  double loss = 0;
  std::vector<Tensor> grads;
};

Step run_step(CausalLM& model, const Tensor& tokens) {
  const int64_t t = tokens.size(1) - 1;
  ModelOutput out = model.forward(tokens.narrow(1, 0, t));
  Tensor loss = causal_lm_loss(out, tokens.narrow(1, 1, t), model.config().router_aux_loss_coef);
  loss.backward();
  Step s{loss.item<double>(), {}};
  for (const Tensor& p : model.parameters()) s.grads.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  model.zero_grad();
  return s;
}

}  // namespace

TEST(Models, EveryTinyPresetTrainsAStep) {
  for (const char* name : kTiny) {
    auto model = tiny(name);
    const ModelConfig& c = model->config();
    manual_seed(2);
    Tensor tokens = randint(0, c.vocab_size, {2, 17});
    ModelOutput out = model->forward(tokens.narrow(1, 0, 16));
    EXPECT_EQ(out.logits.shape(), (Shape{2, 16, c.vocab_size})) << name;
    // MoE models' load-balancing loss; DeepSeek-V3 has none (its coefficient is 0: the bias balances).
    EXPECT_EQ(out.aux_loss.defined(), c.is_moe() && c.router_aux_loss_coef != 0) << name;
    Step s = run_step(*model, tokens);
    // An untrained model predicts about uniformly: loss near log(V).
    EXPECT_NEAR(s.loss, std::log(double(c.vocab_size)), 0.3) << name;
    int64_t with_grad = 0;
    for (const Tensor& g : s.grads) with_grad += g.defined();
    // Every parameter gets a gradient, except experts no token was routed to.
    if (!c.is_moe()) {
      EXPECT_EQ(with_grad, int64_t(s.grads.size())) << name;
    } else {
      EXPECT_GT(with_grad, int64_t(s.grads.size()) / 2) << name;
    }
  }
}

TEST(Models, HuggingFaceParameterNames) {
  auto gpt2 = tiny("tiny-gpt2");
  std::map<std::string, Tensor> sd = gpt2->state_dict();
  for (const char* key : {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.1.attn.c_attn.weight",
                          "transformer.h.0.attn.c_proj.bias", "transformer.h.0.mlp.c_fc.weight",
                          "transformer.h.1.ln_2.bias", "transformer.ln_f.weight"})
    EXPECT_TRUE(sd.count(key)) << key;
  EXPECT_EQ(sd["transformer.h.0.attn.c_attn.weight"].shape(), (Shape{64, 192}));  // Conv1D: (in, out)
  EXPECT_FALSE(sd.count("lm_head.weight"));                                       // tied
  auto qwen = tiny("tiny-qwen3-moe");
  sd = qwen->state_dict();
  for (const char* key : {"model.embed_tokens.weight", "model.layers.0.self_attn.q_norm.weight",
                          "model.layers.0.mlp.gate_proj.weight", "model.layers.1.mlp.gate.weight",
                          "model.layers.1.mlp.experts.7.down_proj.weight", "model.norm.weight", "lm_head.weight"})
    EXPECT_TRUE(sd.count(key)) << key;
  EXPECT_EQ(sd["model.layers.0.self_attn.k_proj.weight"].shape(), (Shape{32, 64}));  // 2 kv heads of 16
}

TEST(Models, CheckpointedLayersGiveIdenticalGradients) {
  for (const char* name : kTiny) {
    auto model = tiny(name);
    manual_seed(3);
    Tensor tokens = randint(0, model->config().vocab_size, {2, 13});
    Step plain = run_step(*model, tokens);
    model->set_layer_runner(
        [](int64_t, const LayerFn& fn, const std::vector<Tensor>& in) { return autograd::checkpoint(fn, in); });
    Step ck = run_step(*model, tokens);
    EXPECT_EQ(plain.loss, ck.loss) << name;
    for (size_t i = 0; i < plain.grads.size(); ++i) {
      ASSERT_EQ(plain.grads[i].defined(), ck.grads[i].defined()) << name << " param " << i;
      if (plain.grads[i].defined()) {  // an expert no token chose has no gradient
        EXPECT_TRUE(testing::bitwise_equal(plain.grads[i], ck.grads[i])) << name << " param " << i;
      }
    }
  }
}

TEST(Models, RunOnTheMetaDevice) {
  for (const char* name : kTiny) {
    nn::Init init;
    init.device = Device::meta();
    auto model = create_model(preset(name), init);
    Tensor tokens = empty({2, 9}, DType::i64, Device::meta());
    ModelOutput out = model->forward(tokens.narrow(1, 0, 8));
    Tensor loss = causal_lm_loss(out, tokens.narrow(1, 1, 8), 0.001);
    loss.backward();
    EXPECT_TRUE(model->parameters()[0].grad().is_meta()) << name;
  }
  // A real size builds on meta in no time and no memory.
  nn::Init init;
  init.device = Device::meta();
  auto big = create_model(preset("qwen3-8b"), init);
  EXPECT_GT(big->num_parameters(), int64_t(8e9));
}

TEST(Models, SafetensorsRoundTripAndHuggingFaceNameVariants) {
  auto a = tiny("tiny-gpt2", 1);
  auto b = tiny("tiny-gpt2", 2);
  const std::string path = ::testing::TempDir() + "tidal_gpt2.safetensors";
  io::save_safetensors(path, a->state_dict(), {{"format", "pt"}});
  io::Safetensors file = io::load_safetensors(path);
  EXPECT_EQ(file.metadata["format"], "pt");
  // GPT2Model naming (no "transformer." prefix) plus the attention-mask buffers of old checkpoints.
  std::map<std::string, Tensor> hf;
  for (auto& [k, t] : file.tensors) hf[k.substr(std::string("transformer.").size())] = t;
  hf["h.0.attn.bias"] = zeros({1, 1, 4, 4});
  hf["lm_head.weight"] = file.tensors["transformer.wte.weight"];
  b->load_hf_state_dict(hf);
  for (auto& [k, t] : a->state_dict()) EXPECT_TRUE(testing::bitwise_equal(b->state_dict()[k], t)) << k;
  hf.erase("ln_f.weight");
  EXPECT_THROW(b->load_hf_state_dict(hf), Error);
  std::remove(path.c_str());
}

TEST(Models, ConfigJsonRoundTripAndErrors) {
  for (const Preset& p : presets()) {
    ModelConfig back = config_from_json(config_to_json(p.config));
    EXPECT_EQ(back.num_hidden_layers, p.config.num_hidden_layers) << p.name;
    EXPECT_EQ(back.kv_heads(), p.config.kv_heads()) << p.name;
    EXPECT_EQ(back.head_size(), p.config.head_size()) << p.name;
    EXPECT_EQ(back.is_moe(), p.config.is_moe()) << p.name;
    EXPECT_EQ(back.qk_norm, p.config.qk_norm) << p.name;
  }
  EXPECT_THROW(preset("gpt5"), Error);
  nlohmann::json j = config_to_json(preset("tiny-llama"));
  j["num_key_value_heads"] = 3;
  EXPECT_THROW(config_from_json(j), Error);
  j = config_to_json(preset("tiny-llama"));
  j["model_type"] = "mamba";
  EXPECT_THROW(config_from_json(j), Error);
  j = config_to_json(preset("tiny-llama"));
  j.erase("hidden_size");
  EXPECT_THROW(config_from_json(j), Error);
}

}  // namespace tidal::models

namespace tidal::models {
TEST(Models, PretrainedDirectoriesSingleFileAndSharded) {
  auto a = tiny("tiny-qwen3", 5);
  const std::string dir = ::testing::TempDir() + "tidal_pretrained";
  std::filesystem::remove_all(dir);
  save_pretrained(*a, dir);
  manual_seed(9);
  Tensor ids = randint(0, a->config().vocab_size, {1, 8});
  NoGradGuard no_grad;
  Tensor want = a->forward(ids).logits;
  EXPECT_TRUE(testing::bitwise_equal(load_pretrained_model(dir)->forward(ids).logits, want));
  // The same weights as two shards with an index, as large Hub models come.
  std::map<std::string, Tensor> sd = a->state_dict(), first, second;
  nlohmann::json index;
  int i = 0;
  for (auto& [k, t] : sd) {
    (i++ % 2 ? second : first)[k] = t;
    index["weight_map"][k] = (i % 2 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors");
  }
  std::filesystem::remove(dir + "/model.safetensors");
  io::save_safetensors(dir + "/model-00001-of-00002.safetensors", first);
  io::save_safetensors(dir + "/model-00002-of-00002.safetensors", second);
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  EXPECT_TRUE(testing::bitwise_equal(load_pretrained_model(dir)->forward(ids).logits, want));
  std::filesystem::remove(dir + "/model-00002-of-00002.safetensors");
  EXPECT_THROW(load_pretrained_model(dir), Error);
  EXPECT_THROW(load_pretrained_model(dir + "/missing"), Error);
}
}  // namespace tidal::models
