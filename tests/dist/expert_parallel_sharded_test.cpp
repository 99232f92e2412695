// Expert parallelism with the distributed optimizer (docs/distributed.md "Expert parallel"): the dense
// parameters sharded over every rank, the experts' over their expert-data-parallel group, for every
// sharding strategy, with and without --overlap-grad-reduce (and ZeRO-3's --overlap-param-gather),
// f32 and --bf16; on 2 ranks (E = 2) and on 4 (DP 2 × EP 2). tiny-qwen3-moe, 4 steps.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/dist/expert_runs.h"
#include "tests/dist/train_runs.h"
#include "tidal/dist/meta_communicator.h"
#include "tidal/dist/single_communicator.h"
#include "tidal/models/moe.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/optim/shard_layout.h"

namespace tidal::train {
namespace {

constexpr int kExpertParallel = 2;

// This rank's elements under E = 2 on this run's N ranks: its model's parameters (the dense ones and
// its experts), its shard (its piece of the dense parameters' layout over the N ranks, then its piece
// of its experts' layout over the N/E ranks holding them: rank r is rank r / E of that group), and
// ZeRO-3's parameter peak without and with --overlap-param-gather (the shard, the parameters outside
// the layers, one layer's or two adjacent layers' whole parameters: docs/distributed.md).
struct Elements {
  int64_t params = 0, shard = 0, zero3 = 0, zero3_prefetch = 0;
};

Elements elements(const TrainArgs& args) {
  dist::Communicator& world = dist::world();
  const int n = world.size(), rank = world.rank(), e = kExpertParallel;
  models::ModelConfig c = args.model;
  nn::Init init;
  init.device = Device::meta();
  const auto model =
      models::create_model(c, init, std::make_shared<dist::MetaCommunicator>(rank % e, e));  // this rank's experts
  std::vector<int64_t> dense, experts;
  Elements out;
  for (const auto& [name, p] : model->named_parameters()) {
    (models::is_expert_parameter(name) ? experts : dense).push_back(p.numel());
    out.params += p.numel();
  }
  out.shard = optim::make_shard_layout(dense, n, optim::kGradNormChunk).shard_size(rank) +
              optim::make_shard_layout(experts, n / e, optim::kGradNormChunk).shard_size(rank / e);
  out.zero3 = zero3_parameter_peak(*model, out.shard, false);
  out.zero3_prefetch = zero3_parameter_peak(*model, out.shard, true);
  return out;
}

std::vector<std::string> with_ep(std::vector<std::string> flags) {
  flags.insert(flags.begin(), {"--expert-model-parallel-size", std::to_string(kExpertParallel)});
  return flags;
}

// One process accumulating the same micro-batches (with `flags`), trained once per test (a test
// leaves no tensor behind: the next ones measure the allocator's peaks).
class OneProcess {
 public:
  const Trained& run(int64_t micro_per_rank, const std::vector<std::string>& flags) {
    std::string key = std::to_string(micro_per_rank);
    for (const std::string& f : flags) key += " " + f;
    if (!runs_.count(key)) {
      dist::SingleCommunicator single;
      runs_[key] = train(single, expert_args(micro_per_rank, flags));
    }
    return runs_.at(key);
  }

 private:
  std::map<std::string, Trained> runs_;
};

void expect_bitwise(const Trained& a, const Trained& b, const std::string& what) {
  EXPECT_EQ(a.losses, b.losses) << what;
  EXPECT_EQ(a.norms, b.norms) << what;
  for (const auto& [name, w] : a.weights) {
    ASSERT_TRUE(b.weights.count(name)) << what << ": " << name;
    EXPECT_EQ(max_abs_difference(w, b.weights.at(name)), 0.0) << what << ": " << name;
  }
}

// The gradient norm before clipping (clipping at 1.0 acts: the norms are about 1.5) against one
// process's: gradients that differ by fp32 summation order (their squares are added in f64), so a
// relative difference of a few f32 ulps; measured 1.5e-7 on 2 and 4 ranks, allowed 1e-6.
void expect_norms(const Trained& ep, const Trained& one) {
  ASSERT_EQ(ep.norms.size(), one.norms.size());
  for (size_t i = 0; i < ep.norms.size(); ++i) EXPECT_NEAR(ep.norms[i], one.norms[i], 1e-6 * one.norms[i]) << i;
}

// Per rank, exactly (without overlap; with --overlap-grad-reduce the gradients' peak depends on how far
// the comm stream got, so it is bounded): parameters whole (ZeRO-3: its peak), the whole gradients (4 bytes
// each: f32 sums with --bf16 too) and, where the step reduces more than once (ZeRO-2/3 here: 2 micro-batches),
// the shard's sums beside them (ZeRO-1 sums in place: Note [Reduce-scatter in place]), AdamW's two moments
// of the shard (and the f32 master weights with --bf16).
void expect_memory(const Trained& t, const Elements& el, const std::string& strategy, bool overlap, bool prefetch,
                   bool bf16) {
  const MemoryStats& st = t.memory;
  const int64_t param_bytes = bf16 ? 2 : 4, state_bytes = bf16 ? 12 : 8;
  const int64_t params = strategy != "optim_grads_params" ? el.params : prefetch ? el.zero3_prefetch : el.zero3;
  EXPECT_EQ(st[MemoryCategory::parameter].peak, param_bytes * params) << strategy;
  EXPECT_EQ(st[MemoryCategory::optimizer_state].peak, state_bytes * el.shard) << strategy;
  // --bf16 under ZeRO-2/3 (2 micro-batches): at the end of the second backward the shard's sums and
  // every f32 sum are there when backward's last gradient, the token embedding's (vocab × hidden, not
  // tied), is added in bf16.
  const models::ModelConfig m = models::preset("tiny-qwen3-moe");
  const int64_t last_bf16 = bf16 ? 2 * m.vocab_size * m.hidden_size : 0;
  // ZeRO-1 without overlap sums in place (Note [Reduce-scatter in place]); with it, as ZeRO-2/3, in the shard's sums.
  const int64_t shard_sums = strategy == "optim" && !overlap ? 0 : 4 * el.shard;
  if (overlap)
    EXPECT_LE(st[MemoryCategory::gradient].peak, 4 * el.params + shard_sums + last_bf16) << strategy;
  else
    EXPECT_EQ(st[MemoryCategory::gradient].peak, 4 * el.params + shard_sums + last_bf16) << strategy;
}

// Every strategy against one process, its memory per rank, and (no_shard too, for the overlap):
//  - ZeRO-1 with one micro-batch per rank is bit for bit no_shard's expert parallelism (the
//    reduce-scatter adds in rank order as the all-reduce does; the norm adds the same squares);
//  - ZeRO-3 is bit for bit ZeRO-2 (it gathers the parameters bit for bit and reduces as ZeRO-2);
//  - --overlap-grad-reduce (buckets of 10⁴ elements, so experts and dense parameters share buckets)
//    changes when the buckets are summed, not how: bit for bit the same run without it.
void every_strategy() {
  OneProcess one_process;
  const Trained no_shard = train(dist::world(), expert_args(1, with_ep({})));
  expect_bitwise(train(dist::world(), expert_args(1, with_ep({"--overlap-grad-reduce", "--ddp-bucket-size", "10000"}))),
                 no_shard, "no_shard with --overlap-grad-reduce");
  std::map<std::string, Trained> plain;
  for (const std::string strategy : {"optim", "optim_grads", "optim_grads_params"}) {
    const int64_t micro_per_rank = strategy == "optim" ? 1 : 2;  // ZeRO-2/3 reduce between micro-batches
    const bool zero3 = strategy == "optim_grads_params";
    const std::vector<std::string> flags = with_ep({"--data-parallel-sharding-strategy", strategy});
    const TrainArgs args = expert_args(micro_per_rank, flags);
    const Elements el = elements(args);
    const Trained& one = one_process.run(micro_per_rank, {});
    const Trained& run = plain[strategy] = train(dist::world(), args);
    expect_agrees(run, one, kExpertParallel, 4, {});
    expect_norms(run, one);
    expect_memory(run, el, strategy, false, false, false);

    std::vector<std::string> overlap = flags;
    overlap.insert(overlap.end(), {"--overlap-grad-reduce", "--ddp-bucket-size", "10000"});
    if (zero3) overlap.push_back("--overlap-param-gather");
    const Trained overlapped = train(dist::world(), expert_args(micro_per_rank, overlap));
    expect_bitwise(overlapped, run, strategy + " with --overlap-grad-reduce");
    expect_memory(overlapped, el, strategy, true, zero3, false);
  }
  expect_bitwise(plain.at("optim"), no_shard, "optim against no_shard");
  expect_bitwise(plain.at("optim_grads_params"), plain.at("optim_grads"), "optim_grads_params against optim_grads");
}

TEST(ShardedExpertParallel, EveryStrategyAgreesWithOneProcess) {
  if (dist::world().size() != 2) GTEST_SKIP() << "2 ranks (DP 2 × EP 2: the OnFourRanks test)";
  every_strategy();
}

TEST(ShardedExpertParallel, EveryStrategyAgreesWithOneProcessOnFourRanks) {
  if (dist::world().size() != 4) GTEST_SKIP() << "needs 4 ranks";
  every_strategy();
}

// --bf16 under ZeRO-2 (f32 gradient sums reduce-scattered after each micro-batch, f32 master weights
// in the shard) and ZeRO-3 with both overlaps, against one bf16 process (kBf16Tolerances).
void bf16() {
  OneProcess one_process;
  for (const std::string strategy : {"optim_grads", "optim_grads_params"}) {
    std::vector<std::string> flags = with_ep({"--data-parallel-sharding-strategy", strategy, "--bf16"});
    const bool zero3 = strategy == "optim_grads_params";
    if (zero3) flags.insert(flags.end(), {"--overlap-grad-reduce", "--overlap-param-gather"});
    const TrainArgs args = expert_args(2, flags);
    const Trained run = train(dist::world(), args);
    expect_agrees(run, one_process.run(2, {"--bf16"}), kExpertParallel, 2, kBf16Tolerances);
    expect_memory(run, elements(args), strategy, zero3, zero3, true);
  }
}

TEST(ShardedExpertParallel, Bf16AgreesWithOneProcess) {
  if (dist::world().size() != 2) GTEST_SKIP() << "2 ranks (DP 2 × EP 2: the OnFourRanks test)";
  bf16();
}

TEST(ShardedExpertParallel, Bf16AgreesWithOneProcessOnFourRanks) {
  if (dist::world().size() != 4) GTEST_SKIP() << "needs 4 ranks";
  bf16();
}

}  // namespace
}  // namespace tidal::train
