// DeepSeek-V3's multi-token prediction (models/mtp.h, --mtp-num-layers) against golden values computed with
// transformers' own DeepSeek-V3 classes wired as Megatron-LM's MTP (scripts/mtp_fixtures.py: two depths, targets
// with ignored positions): the main loss, each depth's loss and the gradients of main + 0.3 / 2 x their sum, in both
// loss compute modes; the same gradients bit for bit under recompute; and the checkpoint's MTP layers, which load
// when the model builds them (their copies of the embedding and head checked) and are skipped otherwise.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/models/hf_golden.h"
#include "tests/support/error_of.h"
#include "tests/support/recompute_modes.h"
#include "tidal/io/safetensors.h"
#include "tidal/memory/chunk_loss.h"
#include "tidal/models/pretrained.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/view.h"
#include "tidal/train/mtp_batch.h"

namespace tidal::models {
namespace {

constexpr double kFactor = 0.3;  // scripts/mtp_fixtures.py's FACTOR
constexpr int64_t kDepths = 2;

struct MtpModel {
  std::unique_ptr<CausalLM> model;
  CausalLM::LoadReport report;
};

MtpModel load(const std::string& dir, int64_t depths) {
  PretrainedFiles f = load_pretrained_dir(dir);
  f.config.mtp_num_layers = depths;
  MtpModel m{create_model(f.config), {}};
  m.report = m.model->load_hf_state_dict(f.weights);
  return m;
}

// main + factor / D x the depths' sum, backward; returns {main, depth losses...} and leaves the gradients.
std::vector<double> run(const CausalLM& model, const GoldenFiles& g, const memory::LossComputeConfig& c) {
  const Tensor& tokens = g.tensors.at("tokens");  // (B, T + 1)
  const Tensor& labels = g.tensors.at("labels");  // (B, T + 1): targets labels[:, 1:]
  const int64_t t = tokens.size(1) - 1;
  const memory::MtpInputs mtp = train::mtp_inputs(tokens, labels, kDepths, 1, 0, Device::cpu());
  const Tensor ids = tokens.narrow(1, 0, t).contiguous(), targets = labels.narrow(1, 1, t).contiguous();
  for (const auto& [name, p] : model.named_parameters()) p.zero_grad();
  memory::LmLosses l = memory::lm_losses(model, ids, targets, c, 0.0, {}, mtp);
  add(l.loss, mul(l.mtp, kFactor / double(kDepths))).backward();
  std::vector<double> out = {l.loss.item<double>()};
  for (const Tensor& d : l.mtp_depths) out.push_back(d.item<double>());
  return out;
}

class MultiTokenPrediction : public ::testing::TestWithParam<bool> {};  // chunked loss or not

TEST_P(MultiTokenPrediction, MatchesTransformersLayersWiredAsMegatron) {
  const GoldenFiles g = load_golden("tiny_deepseek_v3_mtp");
  MtpModel m = load(g.dir, kDepths);
  EXPECT_EQ(m.report.mtp_tensors, 0);
  memory::LossComputeConfig c;
  c.chunked = GetParam();
  c.chunk_size = 5;  // uneven chunks of the 32 rows
  const std::vector<double> losses = run(*m.model, g, c);
  const std::vector<float> want_mtp = g.tensors.at("mtp_losses").to_vector<float>();
  EXPECT_NEAR(losses[0], g.tensors.at("loss").to_vector<float>()[0], 2e-6);
  for (int64_t k = 0; k < kDepths; ++k)
    EXPECT_NEAR(losses[size_t(k + 1)], want_mtp[size_t(k)], 2e-6) << "depth " << k + 1;
  std::map<std::string, Tensor> params;
  for (const auto& [name, p] : m.model->named_parameters()) params.emplace(name, p);
  int checked = 0;
  for (const auto& [key, want] : g.tensors) {
    if (!key.starts_with("grad.")) continue;
    const std::string name = key.substr(5);
    ASSERT_TRUE(params.count(name)) << name;
    EXPECT_LT(relative_error(params.at(name).grad(), want), 2e-5) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 15);
}

INSTANTIATE_TEST_SUITE_P(LossModes, MultiTokenPrediction, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Chunked" : "Default"; });

std::map<std::string, std::vector<float>> gradients(const CausalLM& model) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, p] : model.named_parameters())
    if (p.grad().defined()) out[name] = p.grad().to_vector<float>();
  return out;
}

TEST(MultiTokenPredictionRecompute, EveryModeGivesTheSameGradientsBitForBit) {
  const GoldenFiles g = load_golden("tiny_deepseek_v3_mtp");
  MtpModel m = load(g.dir, kDepths);
  const ModelConfig& c = m.model->config();
  run(*m.model, g, {});
  const auto plain = gradients(*m.model);
  for (const testing::RecomputeMode& mode :
       {testing::RecomputeMode{"full", "full", "uniform", 1, false, -1, false, -1, ""},
        testing::RecomputeMode{"block", "full", "block", 2, false, -1, false, -1, ""},
        testing::RecomputeMode{"mla_up_proj", "selective", "", -1, false, -1, false, -1, "mla_up_proj"},
        testing::RecomputeMode{"moe", "selective", "", -1, false, -1, false, -1, "moe"},
        testing::RecomputeMode{"act+norm", "", "", -1, true, -1, true, -1, ""}}) {
    m.model->set_recompute(memory::plan_recompute(mode.parse(c), c));
    run(*m.model, g, {});
    m.model->set_recompute({});
    const auto got = gradients(*m.model);
    ASSERT_EQ(got.size(), plain.size()) << mode.name;
    for (const auto& [name, want] : plain) EXPECT_EQ(got.at(name), want) << mode.name << ": " << name;
  }
}

TEST(MultiTokenPredictionLoad, TheLayersLoadOnlyWhenTheModelBuildsThem) {
  const std::string fixture = fixture_dir("tiny_deepseek_v3_mtp");
  // 22 tensors per MTP layer: its decoder layer's 16 (8 experts' 3), enorm, hnorm, eh_proj, shared_head.norm,
  // and DeepSeek's copies of the embedding and the head.
  EXPECT_EQ(load(fixture, 0).report.mtp_tensors, 2 * 44);  // transformers' behaviour: all skipped
  EXPECT_EQ(load(fixture, 1).report.mtp_tensors, 44);      // depth 2 skipped
  const std::string dir = ::testing::TempDir() + "tidal_mtp_load";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(fixture + "/config.json", dir + "/config.json");
  std::map<std::string, Tensor> weights = io::load_safetensors(fixture + "/model.safetensors").tensors;
  const Tensor head = weights.at("lm_head.weight");
  weights["model.layers.3.shared_head.head.weight"] = mul(head, 2.0);  // a head of its own: not tidal's MTP
  io::save_safetensors(dir + "/model.safetensors", weights);
  EXPECT_NE(testing::error_of([&] { load(dir, 2); }).find("model.layers.3.shared_head.head.weight"), std::string::npos);
  weights["model.layers.3.shared_head.head.weight"] = head;
  io::save_safetensors(dir + "/model.safetensors", weights);
  EXPECT_NO_THROW(load(dir, 2));
  // More depths than the checkpoint holds: depth 3's weights are missing, by name.
  EXPECT_NE(testing::error_of([&] { load(dir, 3); }).find("model.layers.5."), std::string::npos);
  // An export writes the copies again, so the directory reads as DeepSeek's release does.
  MtpModel m = load(fixture, kDepths);
  save_pretrained(*m.model, dir);
  const std::map<std::string, Tensor> saved = io::load_safetensors(dir + "/model.safetensors").tensors;
  EXPECT_EQ(saved.size(), weights.size());
  EXPECT_EQ(saved.at("model.layers.4.embed_tokens.weight").to_vector<float>(),
            weights.at("model.embed_tokens.weight").to_vector<float>());
  EXPECT_EQ(load_config(dir + "/config.json").num_nextn_predict_layers, kDepths);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tidal::models
