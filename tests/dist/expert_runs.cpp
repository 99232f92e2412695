#include "tests/dist/expert_runs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/dist/train_runs.h"
#include "tidal/dist/single_communicator.h"
#include "tidal/models/causal_lm.h"
#include "tidal/models/moe.h"
#include "tidal/models/pretrained.h"
#include "tidal/nn/lora.h"
#include "tidal/profile/profiler.h"
#include "tidal/rng.h"
#include "tidal/train/setup.h"
#include "tidal/train/step.h"

namespace tidal::train {

Trained train(dist::Communicator& comm, const TrainArgs& args) {
  models::ModelConfig config = args.model;
  std::FILE* quiet = std::fopen("/dev/null", "w");
  Trained t;
  t.model = args.model;
  {
    Setup s = setup_training(args, config, quiet, comm);
    profile::Profiler profiler(profile::ProfileOptions{}, nlohmann::json::object());
    SavedTensors saved;
    const int64_t calls = comm.stats().calls;
    for (int64_t it = 1; it <= args.train_iters; ++it) {
      const StepResult r = train_step(it, args, s, profiler, saved, [](int64_t) {});
      t.losses.push_back(r.loss);
      t.norms.push_back(r.grad_norm);
    }
    t.comm_calls = comm.stats().calls - calls;
    t.memory = device_allocator(Device::cpu()).stats();
    parallel::ParamGather::Scope whole(s.param_gather.get(), /*whole=*/true);  // ZeRO-3: the parameters' values
    int64_t expert_adapters = 0;  // --lora-target-modules on experts: each rank holds its experts' adapters
    t.slabs = s.model->named_slabs();
    for (const auto& [name, p] : s.model->named_parameters()) {
      t.weights[name] = p.detach().clone().to(DType::f32);
      if (!models::is_expert_parameter(name)) continue;
      (nn::is_lora_parameter(name) ? expert_adapters : t.expert_bytes) += p.numel() * p.itemsize();
    }
    t.parameter_bytes = t.memory[MemoryCategory::parameter].allocated - expert_adapters;
  }
  std::fclose(quiet);
  return t;
}

std::string tiny_deepseek_v4() {
  return std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/hf/tiny_deepseek_v4_csa/config.json";
}

TrainArgs expert_args(int64_t micro_per_rank, const std::vector<std::string>& flags, const std::string& model) {
  const int64_t micro = 2;
  return args_for(micro, micro * micro_per_rank * dist::world().size(), "", model, flags);
}

namespace {

// The bytes of one rank's routed experts under E-way expert parallelism: per sparse layer, num_experts / E
// experts of 3 weights of hidden x moe_ffn (`element` bytes each).
int64_t expert_bytes(const models::ModelConfig& m, int e, int64_t element) {
  int64_t sparse = 0;
  for (int64_t l = 0; l < m.num_hidden_layers + m.mtp_num_layers; ++l) sparse += m.is_moe_layer(l) ? 1 : 0;
  return sparse * (m.num_experts / e) * 3 * m.hidden_size * m.moe_intermediate_size * element;
}

// The largest |a - b| - relative × max(|a|, |b|) over the elements.
double max_excess(const Tensor& a, const Tensor& b, double relative) {
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double big = std::max(std::abs(double(x[i])), std::abs(double(y[i])));
    worst = std::max(worst, std::abs(double(x[i]) - double(y[i])) - relative * big);
  }
  return worst;
}

}  // namespace

void expect_agrees(const Trained& ep, const Trained& one, int e, int64_t element, Tolerances tol) {
  EXPECT_EQ(ep.losses.size(), one.losses.size());
  double loss_diff = 0, weight_diff = 0;
  for (size_t i = 0; i < ep.losses.size() && i < one.losses.size(); ++i) {
    EXPECT_NEAR(ep.losses[i], one.losses[i], tol.loss) << "step " << i;
    loss_diff = std::max(loss_diff, std::abs(ep.losses[i] - one.losses[i]));
  }
  // Every parameter of this rank, the experts by their global names (stacked ones by their rows), is one process's.
  int64_t expert_elements = 0;
  for (const auto& [name, w] : ep.weights) {
    EXPECT_TRUE(one.weights.count(name)) << name;
    if (!one.weights.count(name)) continue;
    Tensor want = one.weights.at(name);
    if (auto slab = ep.slabs.find(name); slab != ep.slabs.end()) {
      EXPECT_EQ(want.shape(), slab->second.whole) << name;
      want = want.narrow(0, slab->second.row, w.size(0));
    }
    EXPECT_EQ(w.shape(), want.shape()) << name;
    if (w.shape() != want.shape()) continue;
    const double d = max_excess(w, want, tol.relative);
    EXPECT_LE(d, tol.weight) << name;
    weight_diff = std::max(weight_diff, d);
    if (models::is_expert_parameter(name) && !nn::is_lora_parameter(name)) expert_elements += w.numel();
  }
  if (std::getenv("TIDAL_PRINT_DIFFERENCES"))  // to measure the tolerances
    std::fprintf(stderr, "[rank %d] E=%d: losses within %.3g, weights within %.3g (beyond the relative part)\n",
                 dist::world().rank(), e, loss_diff, weight_diff);
  const models::ModelConfig& m = ep.model;
  // Per rank and MoE layer: num_experts / E experts × 3 weights of hidden × moe_ffn elements.
  EXPECT_EQ(expert_elements * element, expert_bytes(m, e, element));
  EXPECT_EQ(ep.expert_bytes, expert_bytes(m, e, element));
}

Trained compare_with_one_process(int e, const std::vector<std::string>& extra, const std::vector<std::string>& both,
                                 Tolerances tol, const std::string& model) {
  std::vector<std::string> flags = {"--expert-model-parallel-size", std::to_string(e)};
  flags.insert(flags.end(), extra.begin(), extra.end());
  flags.insert(flags.end(), both.begin(), both.end());
  Trained ep = train(dist::world(), expert_args(1, flags, model));
  dist::SingleCommunicator single;
  Trained one = train(single, expert_args(1, both, model));
  // f32 parameters, or bf16 with --bf16.
  const int64_t element = std::find(both.begin(), both.end(), "--bf16") != both.end() ? 2 : 4;
  expect_agrees(ep, one, e, element, tol);
  const models::ModelConfig& m = ep.model;
  // What expert parallelism alone takes off a rank (ZeRO-3 shards the rest too).
  if (std::find(extra.begin(), extra.end(), "optim_grads_params") == extra.end()) {
    EXPECT_EQ(one.parameter_bytes - ep.parameter_bytes, expert_bytes(m, 1, element) - expert_bytes(m, e, element));
  }
  return ep;
}

void expect_same_tensors(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want,
                         double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(got.count(name)) << what << ": " << name;
    const Tensor& g = got.at(name);
    ASSERT_EQ(g.dtype(), w.dtype()) << what << ": " << name;
    ASSERT_EQ(g.shape(), w.shape()) << what << ": " << name;
    const double d = max_abs_difference(g.to(DType::f32), w.to(DType::f32));
    EXPECT_LE(d, tolerance) << what << ": " << name;
    worst = std::max(worst, d);
  }
  if (std::getenv("TIDAL_PRINT_DIFFERENCES"))
    std::fprintf(stderr, "[rank %d] %s: within %.3g\n", dist::world().rank(), what.c_str(), worst);
}

void write_pretrained_moe(dist::Communicator& world, const std::string& dir) {
  if (world.rank() == 0) {
    std::filesystem::remove_all(dir);
    manual_seed(99);
    models::save_pretrained(*models::create_model(models::preset("tiny-qwen3-moe")), dir + "/hf");
  }
  world.barrier();
}

std::vector<std::string> pretrained_moe_flags(const std::string& dir, int64_t global) {
  return {"--pretrained",
          dir + "/hf",
          "--mock-data",
          "--train-iters",
          "2",
          "--seq-length",
          "16",
          "--micro-batch-size",
          "2",
          "--global-batch-size",
          std::to_string(global),
          "--eval-interval",
          "0",
          "--attention-dropout",
          "0",
          "--hidden-dropout",
          "0"};
}

}  // namespace tidal::train
