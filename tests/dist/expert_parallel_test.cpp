// Expert parallelism (--expert-model-parallel-size, docs/distributed.md "Expert parallel"): the
// all-to-all of rows and its backward, and E ranks training tiny-qwen3-moe against one process on the
// same global batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/dist/expert_runs.h"
#include "tests/dist/train_runs.h"
#include "tidal/allocator.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/dist/meta_communicator.h"
#include "tidal/dist/single_communicator.h"
#include "tidal/models/causal_lm.h"
#include "tidal/models/moe.h"
#include "tidal/ops/all_to_all.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/reduce.h"
#include "tidal/parallel/expert.h"
#include "tidal/parallel/groups.h"
#include "tidal/profile/profiler.h"
#include "tidal/rng.h"
#include "tidal/train/main_grads.h"
#include "tidal/train/setup.h"
#include "tidal/train/step.h"

namespace tidal::train {
namespace {

// Rows rank `from` sends to rank `to` (some none).
int64_t rows_between(int from, int to) { return (from + 2 * to + 1) % 3; }
// The value of column c of row i of those rows.
float value(int from, int to, int64_t i, int64_t c) { return float(100 * from + 10 * to + i) + 0.25f * float(c); }
// A weight on the received row: the adjoint check's other vector.
float weight(int at, int from, int64_t i, int64_t c) { return float(7 * at + 3 * from + i) - 0.5f * float(c); }

// Forward: every rank receives exactly the rows sent to it, in rank order. Backward, checked as the
// adjoint of a linear map (<A x, w> = <x, A^T w>, exact for a permutation of rows): the gradient of
// Σ out ⊙ w reaches each sent row from where it landed.
TEST(AllToAllRows, ForwardAndBackwardAreTheExchangeAndItsReverse) {
  dist::Communicator& comm = dist::world();
  const int me = comm.rank(), n = comm.size();
  const int64_t cols = 3;
  std::vector<int64_t> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
  std::vector<double> x_values, w_values;
  for (int r = 0; r < n; ++r) {
    send[size_t(r)] = rows_between(me, r);
    recv[size_t(r)] = rows_between(r, me);
    for (int64_t i = 0; i < send[size_t(r)]; ++i)
      for (int64_t c = 0; c < cols; ++c) x_values.push_back(value(me, r, i, c));
    for (int64_t i = 0; i < recv[size_t(r)]; ++i)
      for (int64_t c = 0; c < cols; ++c) w_values.push_back(weight(me, r, i, c));
  }
  const int64_t sent = int64_t(x_values.size()) / cols, received = int64_t(w_values.size()) / cols;
  Tensor x = from_vector(x_values, {sent, cols}).set_requires_grad(true);
  Tensor w = from_vector(w_values, {received, cols});
  Tensor out = all_to_all_rows(comm, x, send, recv);
  ASSERT_EQ(out.shape(), Shape({received, cols}));
  const std::vector<float> got = out.to_vector<float>();
  size_t k = 0;
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < recv[size_t(r)]; ++i)
      for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(got[k++], value(r, me, i, c)) << "from " << r;
  sum(mul(out, w)).backward();
  const std::vector<float> grad = x.grad().to_vector<float>();
  k = 0;
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < send[size_t(r)]; ++i)
      for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(grad[k++], weight(r, me, i, c)) << "to " << r;
}

// On the meta device it moves nothing and allocates the rows it would receive.
TEST(AllToAllRows, OnMetaAllocatesTheReceivedRows) {
  dist::MetaCommunicator comm(1, 3);
  Tensor x = empty({5, 4}, DType::f32, Device::meta());
  EXPECT_EQ(all_to_all_rows(comm, x, {2, 2, 1}, {2, 2, 2}).shape(), Shape({6, 4}));
}

// With even counts (what a dry run assumes, models/moe.cpp) the meta exchange allocates the bytes the
// real one does, forward and backward: peak and total allocations.
TEST(AllToAllRows, OnMetaAllocatesWhatTheRealExchangeDoes) {
  dist::Communicator& comm = dist::world();
  const int n = comm.size();
  const std::vector<int64_t> even(static_cast<size_t>(n), 3);
  auto bytes = [&](dist::Communicator& c, Device d) {
    Allocator& a = device_allocator(d);
    Tensor x = zeros({3 * n, 8}, DType::f32, d).set_requires_grad(true);
    a.reset_peak_stats();
    const MemoryStats before = a.stats();
    sum(all_to_all_rows(c, x, even, even)).backward();
    const MemoryStats after = a.stats();
    return std::vector<int64_t>{after.peak_allocated - before.allocated, after.total_allocs - before.total_allocs};
  };
  dist::MetaCommunicator meta(comm.rank(), n);
  const std::vector<int64_t> real = bytes(comm, Device::cpu());
  EXPECT_GT(real[0], 0);
  EXPECT_EQ(bytes(meta, Device::meta()), real);
}

// A sparse block whose router sends every token to experts 0 and 1 (rank 0's): the other ranks of
// the group receive no rows, run no expert and still take part in both exchanges, forward and
// backward. Output and input gradient equal the block with every expert in one process.
TEST(ExpertParallel, RanksWithoutRowsStillExchange) {
  dist::Communicator& world = dist::world();
  const int n = world.size();
  models::ModelConfig c = models::preset("tiny-qwen3-moe");
  if (c.num_experts % n != 0) GTEST_SKIP() << n << " ranks";
  auto run = [&](std::shared_ptr<dist::Communicator> group) {
    manual_seed(7);
    models::SparseMoeBlock block(c, nn::Init{}, std::move(group));
    {
      NoGradGuard no_grad;
      for (const auto& [name, p] : block.named_parameters())
        if (name == "gate.weight") {
          Tensor w = p;
          w.fill_(0.0);
          w.narrow(0, 0, 1).fill_(1.0);
          w.narrow(0, 1, 1).fill_(0.5);
        }
    }
    Tensor x = full({2, 8, c.hidden_size}, 0.1, DType::f32).set_requires_grad(true);
    models::RouterStats stats;
    Tensor y = block.forward(x, stats);
    sum(mul(y, y)).backward();
    return std::vector<Tensor>{y.detach(), x.grad()};
  };
  const std::vector<Tensor> ep = run(std::shared_ptr<dist::Communicator>(&world, [](dist::Communicator*) {}));
  const std::vector<Tensor> one = run(nullptr);
  EXPECT_LE(max_abs_difference(ep[0], one[0]), 1e-7);
  EXPECT_LE(max_abs_difference(ep[1], one[1]), 1e-7);
}

TEST(ExpertParallel, ExpertsOnEveryRankAgreeWithOneProcess) {
  const int n = dist::world().size();
  if (n < 2 || models::preset("tiny-qwen3-moe").num_experts % n != 0) GTEST_SKIP() << n << " ranks";
  compare_with_one_process(n);
}

// LoRA on every linear layer, the experts' included: each rank trains its experts' adapters as one process does.
TEST(ExpertParallel, LoraAdaptersAgreeWithOneProcess) {
  const int n = dist::world().size();
  if (n < 2 || models::preset("tiny-qwen3-moe").num_experts % n != 0) GTEST_SKIP() << n << " ranks";
  compare_with_one_process(n, {}, {"--lora-target-modules", "all-linear", "--lora-r", "4"});
  // ZeRO-3: the frozen experts sharded over their expert-data-parallel group, the frozen dense base over every rank.
  compare_with_one_process(n, {"--data-parallel-sharding-strategy", "optim_grads_params"},
                           {"--lora-target-modules", "all-linear", "--lora-r", "4"});
}

// The MoE block recomputed in backward (the routing replayed: --recompute-modules moe, and the whole
// layers with full recompute), the experts' activation recomputed (moe_act) and the saves offloaded:
// the same result. A recompute of the block re-runs its exchanges on every rank: 3 more calls (the
// counts, the dispatch, the return) per MoE layer and micro-batch.
TEST(ExpertParallel, RecomputeAndOffloadAgreeWithOneProcess) {
  const int n = dist::world().size();
  if (n < 2 || models::preset("tiny-qwen3-moe").num_experts % n != 0) GTEST_SKIP() << n << " ranks";
  const int64_t replayed = 4 /*steps*/ * 1 /*micro-batch*/ * 1 /*MoE layer*/ * 3;
  const Trained plain = compare_with_one_process(n);
  EXPECT_EQ(compare_with_one_process(n, {"--recompute-modules", "moe"}).comm_calls - plain.comm_calls, replayed);
  const std::vector<std::string> full = {"--recompute-granularity", "full", "--recompute-method", "uniform",
                                         "--recompute-num-layers",  "1"};
  EXPECT_EQ(compare_with_one_process(n, full).comm_calls - plain.comm_calls, replayed);
  EXPECT_EQ(compare_with_one_process(n, {"--recompute-modules", "moe_act"}).comm_calls, plain.comm_calls);
  compare_with_one_process(n, {"--activation-offload"});
}

// --bf16: bf16 parameters and activations, f32 gradient sums (main grads) and master weights; with
// recompute and offload too.
TEST(ExpertParallel, Bf16AgreesWithOneProcess) {
  const int n = dist::world().size();
  if (n < 2 || models::preset("tiny-qwen3-moe").num_experts % n != 0) GTEST_SKIP() << n << " ranks";
  compare_with_one_process(n, {}, {"--bf16"}, kBf16Tolerances);
  // The MoE block recomputed in backward and the saves offloaded: the same bf16 values again.
  compare_with_one_process(n, {"--recompute-modules", "moe"}, {"--bf16"}, kBf16Tolerances);
  compare_with_one_process(n, {"--activation-offload"}, {"--bf16"}, kBf16Tolerances);
}

// DeepSeek-V3's MoE: sigmoid scores with the correction bias, group-limited top-k, routed scaling and a
// shared expert (replicated: its gradient is summed over every rank), MLA attention; with the block
// recomputed (the routing replayed) too.
TEST(ExpertParallel, DeepseekV3AgreesWithOneProcess) {
  const int n = dist::world().size();
  if (n < 2 || models::preset("tiny-deepseek-v3").num_experts % n != 0) GTEST_SKIP() << n << " ranks";
  compare_with_one_process(n, {}, {}, {}, "tiny-deepseek-v3");
  compare_with_one_process(n, {"--recompute-modules", "moe"}, {}, {}, "tiny-deepseek-v3");
  // Multi-token prediction: the MTP depths' MoE layers shard their experts like the model's.
  compare_with_one_process(n, {}, {"--mtp-num-layers", "2"}, {}, "tiny-deepseek-v3");
  // The expert-bias update from every rank's counts (all-reduced): the biases, and so the routing of the
  // later steps, are one process's.
  compare_with_one_process(n, {}, {"--moe-router-enable-expert-bias", "--moe-router-bias-update-rate", "0.05"}, {},
                           "tiny-deepseek-v3");
}

// DP 2 × EP 2: two expert-parallel groups {0, 1}, {2, 3}; ranks 0 and 2 (and 1 and 3) hold the same
// experts and sum their gradients.
TEST(ExpertParallel, DataAndExpertParallelOnFourRanks) {
  if (dist::world().size() != 4) GTEST_SKIP() << "needs 4 ranks";
  compare_with_one_process(2);
  compare_with_one_process(2, {"--recompute-modules", "moe"});
  compare_with_one_process(2, {}, {"--bf16"}, kBf16Tolerances);
}

// --bf16's expose() (train/main_grads.h) asks which experts some rank has a gradient sum for over
// the expert-data-parallel group (the ranks holding the same experts), not over all ranks: on DP 2 ×
// EP 2, rank 0's experts 0, 1 and rank 1's experts 2, 3 sit at the same positions of their lists.
// Rank 0 sums expert 0, rank 1 expert 3, ranks 2 and 3 none: rank 2 gets zeros for expert 0, rank 3
// for expert 3, and nobody a gradient for experts 1 and 2 (over all ranks, rank 0 would take rank
// 1's second expert for its own and make zeros that rank 2 does not).
TEST(ExpertParallel, Bf16MainGradsAskTheExpertDataGroupOnFourRanks) {
  dist::Communicator& world = dist::world();
  if (world.size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const int me = world.rank(), first = 2 * (me % 2);
  parallel::ParallelLayout layout;
  layout.expert = 2;
  const parallel::ParallelGroups groups(world, layout.on(world.size()));
  std::vector<std::pair<std::string, Tensor>> params;
  params.emplace_back("model.norm.weight", ones({4}, DType::bf16).set_requires_grad(true));
  for (int g = first; g < first + 2; ++g)
    params.emplace_back("model.layers.1.mlp.experts." + std::to_string(g) + ".up_proj.weight",
                        ones({4}, DType::bf16).set_requires_grad(true));
  MainGrads main_grads(params);
  main_grads.begin_backward(false);
  Tensor loss = sum(params[0].second);
  if (me == 0) loss = add(loss, sum(params[1].second));
  if (me == 1) loss = add(loss, sum(params[2].second));
  loss.backward();
  main_grads.expose(world, groups.expert_data());
  auto grad_sum = [&](size_t i) {
    const Tensor g = params[i].second.grad();
    if (!g.defined()) return -1.0;
    EXPECT_EQ(g.dtype(), DType::f32) << params[i].first;
    return sum(g).item<double>();
  };
  EXPECT_EQ(grad_sum(0), 4.0);
  const std::vector<std::vector<double>> expected = {{4.0, -1.0}, {-1.0, 4.0}, {0.0, -1.0}, {-1.0, 0.0}};
  EXPECT_EQ(grad_sum(1), expected[size_t(me)][0]) << params[1].first;
  EXPECT_EQ(grad_sum(2), expected[size_t(me)][1]) << params[2].first;
}

TEST(ExpertParallel, GroupsAreMegatronsLayout) {
  dist::Communicator& world = dist::world();
  const int n = world.size();
  if (n % 2 != 0) GTEST_SKIP() << n << " ranks";
  parallel::ParallelLayout layout;
  layout.expert = 2;
  const parallel::ParallelGroups g(world, layout.on(n));
  EXPECT_EQ(g.experts()->size(), 2);
  EXPECT_EQ(g.experts()->rank(), world.rank() % 2);
  EXPECT_EQ(g.expert_data()->size(), n / 2);
  EXPECT_EQ(g.expert_data()->rank(), world.rank() / 2);
  EXPECT_EQ(&g.data(), &world);  // no context parallelism: the data-parallel group is the world
  EXPECT_EQ(g.context(), nullptr);
}

std::string refusal(const std::vector<std::string>& flags, int ranks, const std::string& model = "tiny-qwen3-moe") {
  std::vector<std::string> argv = {"--model", model, "--mock-data"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  try {
    const TrainArgs args = parse_train_args(argv);
    parallel::check_expert_parallel(args.parallel.on(ranks), args.model);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ExpertParallel, RefusesWhatItCannotDo) {
  const std::vector<std::string> ep2 = {"--expert-model-parallel-size", "2"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), ep2.begin(), ep2.end());
    return more;
  };
  EXPECT_EQ(refusal(ep2, 2), "");
  EXPECT_EQ(refusal(with({"--save", "/tmp/x", "--load", "/tmp/x"}), 2), "");  // no_shard checkpoints gather
  EXPECT_EQ(refusal({"--expert-model-parallel-size", "1"}, 3, "tiny-gpt2"), "");
  EXPECT_NE(refusal({"--expert-model-parallel-size", "0"}, 2).find("--expert-model-parallel-size must be in [1,"),
            std::string::npos);
  EXPECT_NE(refusal(ep2, 2, "tiny-llama").find("divides the experts of MoE layers, but the model (llama) has none"),
            std::string::npos);
  EXPECT_NE(refusal(ep2, 3).find("--expert-model-parallel-size 2 does not divide the 3 ranks"), std::string::npos);
  EXPECT_NE(refusal({"--expert-model-parallel-size", "3"}, 3)
                .find("--expert-model-parallel-size 3 does not divide the model's 8 experts (num_experts)"),
            std::string::npos);
  EXPECT_EQ(refusal(with({"--auto-memory"}), 4), "");  // tidal plan plans it (docs/planning.md)
  // Checkpoints with no_shard (tests/dist/expert_parallel_checkpoint_test.cpp).
  EXPECT_EQ(refusal(with({"--save", "/tmp/x"}), 4), "");
  EXPECT_EQ(refusal(with({"--load", "/tmp/x"}), 4), "");
  // Every sharding strategy and --overlap-grad-reduce train (tests/dist/expert_parallel_sharded_test.cpp),
  // and save and load checkpoints (tests/dist/expert_parallel_sharded_checkpoint_test.cpp).
  for (const std::string strategy : {"optim", "optim_grads", "optim_grads_params"}) {
    EXPECT_EQ(refusal(with({"--data-parallel-sharding-strategy", strategy, "--overlap-grad-reduce"}), 4), "");
    for (const char* flag : {"--save", "--load"})
      EXPECT_EQ(refusal(with({"--data-parallel-sharding-strategy", strategy, flag, "/tmp/x"}), 4), "") << flag;
  }
  EXPECT_EQ(refusal(with({"--use-distributed-optimizer", "--load", "/tmp/x"}), 4), "");
}

// A dry run's model (meta device) builds this rank's experts only and runs forward and backward with
// the even routing the planner assumes.
TEST(ExpertParallel, MetaModelHoldsItsExpertsAndRuns) {
  models::ModelConfig c = models::preset("tiny-qwen3-moe");
  nn::Init init;
  init.device = Device::meta();
  auto model = models::create_model(c, init, std::make_shared<dist::MetaCommunicator>(1, 4));
  std::vector<std::string> experts;
  for (const auto& [name, p] : model->named_parameters())
    if (models::is_expert_parameter(name)) experts.push_back(name);
  ASSERT_EQ(experts.size(), size_t(6));
  EXPECT_EQ(experts[0], "model.layers.1.mlp.experts.2.gate_proj.weight");
  Tensor ids = empty({2, 16}, DType::i64, Device::meta());
  const models::ModelOutput out = model->forward(ids);
  Tensor loss = add(sum(out.logits), out.aux_loss);
  loss.backward();
  EXPECT_TRUE(loss.is_meta());
}

// Expert x context parallel: the rank's two chunks of each sequence go through the experts of the EP
// group; the load-balancing loss takes the sample's counts over the CP group (models/moe.h).
TEST(ExpertParallel, ContextParallelAgreesWithOneProcess) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  compare_with_one_process(2, {"--context-parallel-size", "2"});  // the EP group is the CP group
  compare_with_one_process(2, {"--context-parallel-size", "2", "--recompute-granularity", "selective",
                               "--recompute-modules", "moe", "--activation-offload"});
}

TEST(ExpertParallel, ContextParallelOnFourRanks) {
  if (dist::world().size() != 4) GTEST_SKIP() << "runs on four ranks (ctest dist4)";
  compare_with_one_process(2, {"--context-parallel-size", "2"});  // DP 2 x CP 2, EP groups = CP groups
  compare_with_one_process(4, {"--context-parallel-size", "2"});  // EP over both samples' CP groups
  compare_with_one_process(2, {"--context-parallel-size", "4"});  // EP 2 inside one CP group of 4
}

}  // namespace
}  // namespace tidal::train
