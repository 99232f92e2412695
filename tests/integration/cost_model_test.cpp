// The dry run's kernel records (plan/kernel_records.h) and the cost model on them
// (plan/cost_model.h): exact GEMM FLOPs of a step, recompute's replayed records, the roofline's
// arithmetic, and offload copies hidden or exposed by the profile's bandwidth. No timing is measured.
#include "tidal/plan/cost_model.h"
#include "tidal/plan/device_profile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "tests/integration/train_helpers.h"
#include "tests/support/error_of.h"

namespace tidal::train {
namespace {

// tiny-gpt2 (2 layers, hidden 64, vocab 512, tied LM head), micro-batches of 2 x 32 tokens.
std::vector<std::string> tiny(const std::vector<std::string>& more) {
  return with({"--model", "tiny-gpt2", "--mock-data", "--seq-length", "32", "--micro-batch-size", "2",
               "--global-batch-size", "2", "--train-iters", "2", "--lr-warmup-iters", "0", "--eval-interval", "0"},
              more);
}

int64_t gemm_flops(const plan::DryRun& d, plan::StepPhase only, bool any_phase) {
  int64_t f = 0;
  for (const plan::StepKernel& k : d.kernels)
    if (k.cost.kind == CostKind::gemm && (any_phase || k.phase == only)) f += k.cost.flops;
  return f;
}

TEST(CostModel, StepGemmFlopsAreSixTimesTokensTimesMatmulParameters) {
  const plan::DryRun d = plan::dry_run(train::parse_train_args(tiny({})));
  // Per layer the four projections hold 12·C² weights (qkv 3C², out C², MLP 4C² twice), the LM head
  // C·V; forward 2·N·weights, backward dX and dW twice that (every input needs its gradient).
  const int64_t N = 2 * 32, C = 64, V = 512, L = 2;
  EXPECT_EQ(gemm_flops(d, plan::StepPhase::other, true), 6 * N * (12 * C * C * L + C * V));
  EXPECT_EQ(gemm_flops(d, plan::StepPhase::forward, false), 2 * N * 12 * C * C * L + 2 * N * C * V);
  EXPECT_EQ(gemm_flops(d, plan::StepPhase::backward, false), 4 * N * (12 * C * C * L + C * V));
  int64_t adamw = 0, attention = 0;
  for (const plan::StepKernel& k : d.kernels) {
    adamw += std::string(k.cost.kernel) == "adamw_step" && k.phase == plan::StepPhase::optimizer;
    attention += k.cost.kind == CostKind::attention && k.layer >= 0;
  }
  EXPECT_EQ(adamw, 4 + 12 * L);  // wte, wpe, final norm weight and bias; 12 tensors per layer
  EXPECT_EQ(attention, 2 * L);   // forward and backward of each layer
}

TEST(CostModel, RecomputeReplaysTheForwardOfEachLayer) {
  const plan::DryRun plain = plan::dry_run(train::parse_train_args(tiny({})));
  const plan::DryRun full = plan::dry_run(train::parse_train_args(
      tiny({"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"})));
  // Each layer's replay runs its forward's kernels in order (a prefix: the replay stops at its last save).
  std::map<int, std::vector<const plan::StepKernel*>> forward, replay;
  for (const plan::StepKernel& k : full.kernels) {
    if (k.phase == plan::StepPhase::forward && k.layer >= 0) forward[k.layer].push_back(&k);
    if (k.phase == plan::StepPhase::recompute) replay[k.layer].push_back(&k);
  }
  ASSERT_EQ(replay.size(), 2u);
  for (const auto& [layer, ks] : replay) {
    ASSERT_LE(ks.size(), forward[layer].size()) << "layer " << layer;
    EXPECT_GT(ks.size(), forward[layer].size() / 2) << "layer " << layer;
    for (size_t i = 0; i < ks.size(); ++i) {
      EXPECT_STREQ(ks[i]->cost.kernel, forward[layer][i]->cost.kernel) << "layer " << layer << " kernel " << i;
      EXPECT_EQ(ks[i]->cost.flops, forward[layer][i]->cost.flops) << "layer " << layer << " kernel " << i;
      EXPECT_EQ(ks[i]->cost.bytes, forward[layer][i]->cost.bytes) << "layer " << layer << " kernel " << i;
    }
  }
  // What recompute adds to the step's GEMMs is exactly the replays' GEMMs.
  EXPECT_EQ(gemm_flops(full, plan::StepPhase::other, true) - gemm_flops(plain, plan::StepPhase::other, true),
            gemm_flops(full, plan::StepPhase::recompute, false));
  EXPECT_GT(gemm_flops(full, plan::StepPhase::recompute, false), 0);
}

plan::DeviceProfile profile() {
  plan::DeviceProfile p;
  p.name = "hand-made";
  p.gemm_flops_f32 = p.gemm_flops_bf16 = 1e12;
  p.attention_flops_f32 = p.attention_flops_bf16 = 5e11;
  p.memory_bandwidth = 1e11;
  p.d2h_bandwidth = p.h2d_bandwidth = 1e10;
  p.disk_bandwidth = 1e9;
  p.kernel_overhead_s = 1e-5;
  p.collective_bandwidth = 1e10;
  p.collective_latency_s = 1e-4;
  return p;
}

TEST(CostModel, RooflineArithmetic) {
  const plan::DeviceProfile p = profile();
  const KernelCost compute_bound{"matmul", CostKind::gemm, DType::f32, 2'000'000'000, 1'000'000};    // 2 ms vs 10 us
  const KernelCost bandwidth_bound{"matmul", CostKind::gemm, DType::f32, 1'000'000, 1'000'000'000};  // 1 us vs 10 ms
  const KernelCost memory{"unary", CostKind::memory, DType::f32, 1'000'000'000'000, 500'000'000};    // flops ignored
  EXPECT_DOUBLE_EQ(plan::kernel_time_s(compute_bound, p), 2e-3 + 1e-5);
  EXPECT_DOUBLE_EQ(plan::kernel_time_s(bandwidth_bound, p), 1e-2 + 1e-5);
  EXPECT_DOUBLE_EQ(plan::kernel_time_s(memory, p), 5e-3 + 1e-5);

  plan::DryRun run;
  run.kernels = {
      {compute_bound, plan::StepPhase::forward, 0, "", "linear"},
      {memory, plan::StepPhase::recompute, 0, "", "gelu"},
      {{"adamw_step", CostKind::optimizer, DType::f32, 0, 200'000'000}, plan::StepPhase::optimizer, -1, "", ""}};
  train::TrainArgs args;
  args.micro_batch_size = args.global_batch_size = 1;
  const plan::StepTime t = plan::predict_step_time(run, args, p);
  EXPECT_EQ(t.kernels, 3);
  EXPECT_EQ(t.flops, 2'000'000'000 + 1'000'000'000'000);
  EXPECT_DOUBLE_EQ(t.gemm_s, 2e-3);
  EXPECT_DOUBLE_EQ(t.memory_s, 5e-3);
  EXPECT_DOUBLE_EQ(t.optimizer_s, 2e-3);
  EXPECT_DOUBLE_EQ(t.overhead_s, 3e-5);
  EXPECT_DOUBLE_EQ(t.recompute_s, 5e-3 + 1e-5);
  EXPECT_DOUBLE_EQ(t.compute_s, 9e-3 + 3e-5);
  EXPECT_DOUBLE_EQ(t.total_s, t.compute_s);
  EXPECT_EQ(t.copy_s, 0);
  EXPECT_EQ(t.hidden_copy_fraction, 1.0);

  // Two ranks, no sharding: each runs one of the two micro-batches the dry run ran (half the forward
  // and recompute), the whole update, and all-reduces the f32 gradients, 2·(n-1)/n of their bytes.
  run.parameter_numels = {1'000'000};  // 1M f32 parameters
  args.global_batch_size = 2;
  const plan::StepTime dp = plan::predict_step_time(run, args.on(2), p);
  EXPECT_DOUBLE_EQ(dp.gemm_s, 1e-3);
  EXPECT_DOUBLE_EQ(dp.optimizer_s, 2e-3);
  EXPECT_DOUBLE_EQ(dp.comm_s, 4e6 / 1e10 + 2 * 1 * 1e-4 + 2 * 1e-4);  // one parameter tensor; loss and norm
  EXPECT_DOUBLE_EQ(dp.exposed_comm_s, dp.comm_s);
  EXPECT_DOUBLE_EQ(dp.total_s, dp.compute_s + dp.comm_s);

  // ZeRO-1: a reduce-scatter of the gradients and an all-gather of the parameters, (n-1)/n each; each
  // rank updates half the parameters.
  args.parallel.sharding = parallel::ShardingStrategy::optim;
  const plan::StepTime z1 = plan::predict_step_time(run, args.on(2), p);
  EXPECT_DOUBLE_EQ(z1.comm_s, (2e6 / 1e10 + 1e-4) + (2e6 / 1e10 + 1e-4) + 2 * 1e-4);
  EXPECT_DOUBLE_EQ(z1.optimizer_s, 1e-3);
  // --overlap-grad-reduce: a reduce-scatter per bucket (10, each 1e-4 of latency), 1.2 ms in all, hides
  // behind the backward (and its recompute) but for the last bucket's; the parameters' all-gather and
  // the scalars stay exposed.
  args.parallel.overlap_grad_reduce = true;
  args.parallel.bucket_size = 100'000;
  run.kernels.push_back({compute_bound, plan::StepPhase::backward, 0, "", "LinearBackward"});
  const plan::StepTime overlapped = plan::predict_step_time(run, args.on(2), p);
  EXPECT_DOUBLE_EQ(overlapped.exposed_comm_s, 1.2e-3 / 10 + 3e-4 + 2e-4);
  EXPECT_DOUBLE_EQ(overlapped.comm_s, z1.comm_s + 9e-4);
}

TEST(CostModel, RefusesAProfileWithoutTheRateItNeeds) {
  plan::DeviceProfile p = profile();
  p.gemm_flops_bf16 = 0;
  p.name = "half";
  std::string what;
  try {
    plan::kernel_time_s({"matmul", CostKind::gemm, DType::bf16, 1, 1}, p);
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_EQ(what,
            "[cost model] device profile 'half': gemm_flops_bf16 must be > 0 to cost this step (calibrate it with "
            "tidal plan --calibrate or set it in the profile)");
}

TEST(CostModel, OffloadCopiesHideBehindComputeWhenFastEnough) {
  const plan::DryRun d = plan::dry_run(train::parse_train_args(tiny({})));
  train::TrainArgs args = train::parse_train_args(tiny({"--activation-offload"}));
  plan::DeviceProfile fast = profile(), slow = profile();
  fast.d2h_bandwidth = fast.h2d_bandwidth = 1e15;
  slow.d2h_bandwidth = slow.h2d_bandwidth = 1e3;
  // The step's own host transfers (the batch, the loss read back) are the same with and without the flag.
  const train::TrainArgs plain = train::parse_train_args(tiny({}));
  const plan::StepTime f0 = plan::predict_step_time(d, plain, fast), s0 = plan::predict_step_time(d, plain, slow);
  const plan::StepTime f = plan::predict_step_time(d, args, fast), s = plan::predict_step_time(d, args, slow);
  EXPECT_GT(f.copy_s, f0.copy_s);
  EXPECT_EQ(f.exposed_copy_s, f0.exposed_copy_s);                                  // every offload copy hidden
  EXPECT_GT(s.exposed_copy_s - s0.exposed_copy_s, 0.99 * (s.copy_s - s0.copy_s));  // nearly all exposed
  EXPECT_DOUBLE_EQ(s.total_s, s.compute_s + s.exposed_copy_s);
  EXPECT_DOUBLE_EQ(f.compute_s, s.compute_s);
  // --offload-prefetch-depth 0 brings a block back only when its backward unpacks it: exposed however fast.
  const plan::StepTime f_no_prefetch = plan::predict_step_time(
      d, train::parse_train_args(tiny({"--activation-offload", "--offload-prefetch-depth", "0"})), fast);
  EXPECT_GT(f_no_prefetch.exposed_copy_s, f0.exposed_copy_s);
}

TEST(CostModel, ARanksDryRunIsItsShareOfTheWholeBatch) {
  // 4 micro-batches over 2 ranks: the one-process dry run is costed at half its kernels, a dry run
  // that played rank 0 of 2 (2 micro-batches, its shard's update) at all of them.
  for (const char* sharding : {"no_shard", "optim_grads_params"}) {
    train::TrainArgs a = train::parse_train_args(tiny({"--data-parallel-sharding-strategy", sharding}));
    a.global_batch_size = 8;
    const plan::StepTime whole = plan::predict_step_time(plan::dry_run(a), a.on(2), profile());
    const plan::StepTime rank = plan::predict_step_time(plan::dry_run(a.on(2), 0), a.on(2), profile());
    EXPECT_NEAR(rank.gemm_s, whole.gemm_s, 1e-12 * whole.gemm_s) << sharding;
    EXPECT_NEAR(rank.attention_s, whole.attention_s, 1e-12 * whole.attention_s) << sharding;
    EXPECT_GT(rank.gemm_s, 0) << sharding;
  }
  train::TrainArgs a = train::parse_train_args(tiny({}));
  a.global_batch_size = 8;
  EXPECT_EQ(testing::error_of([&] { plan::predict_step_time(plan::dry_run(a.on(2), 0), a.on(4), profile()); }),
            "[cost model] the dry run played a rank of 2 ranks, not of 4");
}

TEST(CostModel, SwapOptimizerExposesTheFirstWindowInAndTheLastOut) {
  const plan::DryRun d = plan::dry_run(train::parse_train_args(tiny({})));
  train::TrainArgs args = train::parse_train_args(tiny({"--swap-optimizer", "--swap-optimizer-times", "4"}));
  plan::DeviceProfile fast = profile();
  fast.d2h_bandwidth = fast.h2d_bandwidth = 1e15;
  const double states = double(d.device.category[size_t(MemoryCategory::optimizer_state)].peak);
  ASSERT_GT(states, 0);
  const plan::StepTime f0 = plan::predict_step_time(d, train::parse_train_args(tiny({})), fast),
                       f = plan::predict_step_time(d, args, fast);
  EXPECT_NEAR(f.copy_s - f0.copy_s, 2 * states / 1e15, 1e-22);
  EXPECT_NEAR(f.exposed_copy_s - f0.exposed_copy_s, 2 * states / 4 / 1e15, 1e-22);  // first window in, last out
}

// A sharded run's step from another strategy's kernels (what tidal plan's search does): ZeRO-1 from
// no_shard's, ZeRO-3 from ZeRO-2's. The same kernels but the update's, which the shard's share scales,
// and a collective's own reduction kernels, which the collectives' time covers in either. Within 1.5% of
// the sharded dry run's own kernels on qwen3-0.6b (ZeRO-1 from no_shard: 1.1%, the norm's kernels over the
// whole gradients, scaled to the shard, above ZeRO-1's over the shard; a shard-sized fill of zeros outside
// the reduction offset that until the reduce-scatter summed in place, starting from zeros inside it: Note
// [Reduce-scatter in place]); within 3% on tiny-qwen3-moe, where the kernels' launch overhead dominates
// (ZeRO-1: a shard's update runs per piece, not per tensor).
TEST(CostModel, AShardedUpdateIsTimedFromAnotherStrategysKernels) {
  struct Case {
    const char* model;
    int ep;
    const char* seq;
    double tolerance;
  };
  const std::vector<std::pair<parallel::ShardingStrategy, parallel::ShardingStrategy>> pairs = {
      {parallel::ShardingStrategy::optim, parallel::ShardingStrategy::no_shard},
      {parallel::ShardingStrategy::optim_grads_params, parallel::ShardingStrategy::optim_grads}};
  for (const Case& k : {Case{"qwen3-0.6b", 1, "256", 0.015}, Case{"tiny-qwen3-moe", 2, "32", 0.03}}) {
    for (const auto& [sharding, from_sharding] : pairs) {
      train::TrainArgs a = train::parse_train_args(with({"--model",
                                                         k.model,
                                                         "--mock-data",
                                                         "--seq-length",
                                                         k.seq,
                                                         "--micro-batch-size",
                                                         "1",
                                                         "--global-batch-size",
                                                         "8",
                                                         "--train-iters",
                                                         "2",
                                                         "--lr-warmup-iters",
                                                         "0",
                                                         "--eval-interval",
                                                         "0",
                                                         "--bf16",
                                                         "--attention",
                                                         "flash",
                                                         "--expert-model-parallel-size",
                                                         std::to_string(k.ep)},
                                                        {}));
      a.parallel.sharding = sharding;
      train::TrainArgs other = a;
      other.parallel.sharding = from_sharding;
      const plan::DeviceProfile p = plan::load_device_profile("h100");
      // The same rank (the search's kernel dry runs play rank 0 for every sharded candidate, as before).
      const plan::DryRun od = plan::dry_run_largest_rank(a.on(4)), fd = plan::dry_run(other.on(4), od.rank);
      const plan::StepTime own = plan::predict_step_time(od, a.on(4), p),
                           from = plan::predict_step_time(fd, a.on(4), p);
      const std::string what = std::string(k.model) + " " + parallel::sharding_name(sharding);
      EXPECT_NEAR(from.compute_s, own.compute_s, k.tolerance * own.compute_s) << what;
      EXPECT_NEAR(from.total_s, own.total_s, k.tolerance * own.total_s) << what;
      EXPECT_NEAR(from.optimizer_s, own.optimizer_s, 0.01 * own.optimizer_s) << what;  // the shard's bytes
      EXPECT_EQ(from.comm_s, own.comm_s) << what;  // from the parameters' sizes alike
    }
  }
  train::TrainArgs a = train::parse_train_args(tiny({"--data-parallel-sharding-strategy", "optim"}));
  a.global_batch_size = 4;
  train::TrainArgs zero2 = a;
  zero2.parallel.sharding = parallel::ShardingStrategy::optim_grads;
  EXPECT_EQ(testing::error_of([&] { plan::predict_step_time(plan::dry_run(zero2.on(2), 0), a.on(2), profile()); }),
            "[cost model] a dry run of a rank under optim_grads does not time optim");
}

// ZeRO-2 with accumulation reduces bucket by bucket during backward (Note [Synchronous buckets]): a collective
// per bucket of at most half a rank's share, each micro-batch, exposed; ZeRO-1 one reduction after the last.
TEST(CostModel, SynchronousBucketsAreACollectiveEach) {
  train::TrainArgs a = train::parse_train_args(tiny({"--data-parallel-sharding-strategy", "optim_grads"}));
  a.global_batch_size = 8;  // 2 ranks x 2 micro-batches of 2
  const plan::DeviceProfile p = profile();
  const plan::DryRun d = plan::dry_run(a.on(2), 0);
  int64_t elements = 0;
  for (int64_t n : d.parameter_numels) elements += n;
  ASSERT_TRUE(a.on(2).parallel.reduces_by_bucket(2, false));
  const int64_t bucket = a.on(2).parallel.bucket_elements_of(elements);
  const int64_t buckets = (elements + bucket - 1) / bucket;
  ASSERT_GE(buckets, 2);
  const plan::StepTime t = plan::predict_step_time(d, a.on(2), p);
  train::TrainArgs z1 = a;
  z1.parallel.sharding = parallel::ShardingStrategy::optim;
  const plan::StepTime one = plan::predict_step_time(plan::dry_run(z1.on(2), 0), z1.on(2), p);
  // Two reductions of the same bytes instead of one, each with a latency per bucket (the parameters' gathers
  // after the update and the scalars alike).
  const double bytes = double(elements) * 4 / 2;  // f32 gradients, (n-1)/n of them
  const double one_reduction = bytes / p.collective_bandwidth + p.collective_latency_s;
  const double bucketed = bytes / p.collective_bandwidth + double(buckets) * p.collective_latency_s;
  EXPECT_NEAR(t.comm_s - one.comm_s, 2 * bucketed - one_reduction, 1e-12);
  EXPECT_NEAR(t.exposed_comm_s - one.exposed_comm_s, 2 * bucketed - one_reduction, 1e-12);
}

// Expert parallelism: the experts' gradients reduce over the N / E ranks of their expert-data group,
// the dense ones over all N; a recompute that replays the MoE block runs its forward's all-to-alls again
// (the counts, dispatch and combine). tiny-qwen3-moe: 2 layers, the second MoE (8 experts, top-2, hidden
// 64), bf16; 4 ranks, E = 2, one micro-batch of 32 tokens a rank.
TEST(CostModel, ExpertParallelExchangesAndReductions) {
  train::TrainArgs a = train::parse_train_args(
      with({"--model", "tiny-qwen3-moe", "--mock-data", "--seq-length", "32", "--micro-batch-size", "1",
            "--global-batch-size", "4", "--train-iters", "2", "--lr-warmup-iters", "0", "--eval-interval", "0",
            "--bf16", "--expert-model-parallel-size", "2"},
           {}));
  const plan::DryRun d = plan::dry_run(a.on(4), 0);
  int64_t dense = 0, experts = 0;
  for (size_t i = 0; i < d.parameter_numels.size(); ++i)
    (d.expert_parameter[i] ? experts : dense) += d.parameter_numels[i];
  ASSERT_GT(experts, 0);
  const plan::DeviceProfile p = profile();
  const plan::StepTime t = plan::predict_step_time(d, a.on(4), p);
  // All-reduces of f32 gradients, 2(n-1)/n of the bytes: n = 4 dense, 2 experts; a latency per
  // collective (two per tensor), and the loss's and the norm's.
  const double bytes = 2 * 4 * (double(dense) * 3 / 4 + double(experts) * 1 / 2);
  const double latencies = double(2 * d.parameter_numels.size() + 2) * p.collective_latency_s;
  const double rows = 32 * 2 * 64 * 2 * 0.5;  // tokens x top-k x hidden x bf16, half to the other rank
  const double all_to_all = 4 * rows / p.collective_bandwidth + 5 * p.collective_latency_s;
  EXPECT_DOUBLE_EQ(t.all_to_all_s, all_to_all);
  EXPECT_NEAR(t.comm_s - t.all_to_all_s, bytes / p.collective_bandwidth + latencies, 1e-15);
  train::TrainArgs moe = a;
  moe.memory.recompute.granularity = memory::Granularity::selective;
  moe.memory.recompute.modules = {memory::RecomputeModule::moe};
  const plan::StepTime r = plan::predict_step_time(plan::dry_run(moe.on(4), 0), moe.on(4), p);
  EXPECT_DOUBLE_EQ(r.all_to_all_s, all_to_all + 2 * rows / p.collective_bandwidth + 3 * p.collective_latency_s);
}

// The plan search keeps a kernel dry run's records merged: fewer of them, the same prediction.
TEST(CostModel, MergedRecordsPredictTheSameStep) {
  const train::TrainArgs a = train::parse_train_args(
      with({"--model", "tiny-qwen3-moe", "--mock-data", "--seq-length", "32", "--micro-batch-size", "1",
            "--global-batch-size", "2", "--train-iters", "2", "--lr-warmup-iters", "0", "--eval-interval", "0"},
           {}));
  const plan::DryRun d = plan::dry_run(a);
  plan::DryRun m = d;
  m.kernels = plan::merge_identical(m.kernels);
  ASSERT_LT(m.kernels.size(), d.kernels.size() / 2);
  int64_t count = 0;
  for (const plan::StepKernel& k : m.kernels) count += k.count;
  EXPECT_EQ(count, int64_t(d.kernels.size()));
  const plan::StepTime x = plan::predict_step_time(d, a, profile()), y = plan::predict_step_time(m, a, profile());
  EXPECT_EQ(x.kernels, y.kernels);
  EXPECT_EQ(x.flops, y.flops);
  EXPECT_NEAR(y.compute_s, x.compute_s, 1e-12 * x.compute_s);
  EXPECT_NEAR(y.total_s, x.total_s, 1e-12 * x.total_s);
}

// Context parallelism with --attention eager: K and V all-gathered in forward and their gradients
// reduce-scattered in backward, (C-1) x a rank's K/V each, two collectives, blocking; a replay of the
// attention core gathers again. tiny-llama (2 layers, 2 kv heads of 16) on 2 ranks, C = 2, 32 tokens.
TEST(CostModel, EagerContextParallelGathersKeysAndValues) {
  train::TrainArgs a =
      train::parse_train_args(with({"--model", "tiny-llama", "--mock-data", "--seq-length", "32", "--micro-batch-size",
                                    "1", "--global-batch-size", "1", "--train-iters", "2", "--lr-warmup-iters", "0",
                                    "--eval-interval", "0", "--attention", "eager", "--context-parallel-size", "2"},
                                   {}));
  const plan::DeviceProfile p = profile();
  const models::ModelConfig& m = a.model;
  const double kv = 2.0 * 16 * double(m.kv_heads() * m.head_size()) * 4;  // K and V of 16 tokens, f32
  const double pass = kv / p.collective_bandwidth + 2 * p.collective_latency_s;
  const plan::StepTime t = plan::predict_step_time(plan::dry_run(a.on(2), 0), a.on(2), p);
  EXPECT_DOUBLE_EQ(t.ring_s, 2 * 2 * pass);  // layers x (forward + backward)
  EXPECT_DOUBLE_EQ(t.exposed_ring_s, t.ring_s);
  a.memory.recompute.granularity = memory::Granularity::selective;
  a.memory.recompute.modules = {memory::RecomputeModule::core_attn};
  EXPECT_DOUBLE_EQ(plan::predict_step_time(plan::dry_run(a.on(2), 0), a.on(2), p).ring_s, 2 * 3 * pass);
}

}  // namespace
}  // namespace tidal::train

namespace tidal::train {
namespace {

// Note [A loss mode from another's run] (plan/search.cpp): a configuration's kept records in one loss mode are its
// run's in another with the head's replaced by any run's in the first mode on as many tokens, record by record.
// Two lists of kept records alike, record by record (names aside).
void expect_same_records(const std::vector<plan::StepKernel>& got, const std::vector<plan::StepKernel>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_STREQ(got[i].cost.kernel, want[i].cost.kernel);
    EXPECT_EQ(got[i].cost.flops, want[i].cost.flops);
    EXPECT_EQ(got[i].cost.bytes, want[i].cost.bytes);
    EXPECT_EQ(got[i].phase, want[i].phase);
    EXPECT_EQ(got[i].layer, want[i].layer);
    EXPECT_EQ(got[i].count, want[i].count);
    EXPECT_EQ(got[i].head, want[i].head);
  }
}

// `world` ranks: rank 0's runs, as the search's.
void expect_made_from_parts(const std::vector<std::string>& base, const std::vector<std::string>& body_flags,
                            const std::vector<std::string>& other_body, int world = 1) {
  const std::vector<std::string> chunk = {"--loss-compute-mode", "chunk", "--loss-chunk-size", "16"};
  auto kept = [&](const std::vector<std::string>& more) {
    train::TrainArgs a = train::parse_train_args(with(base, more));
    a.parallel.world = world;
    return plan::kept_for_timing(plan::dry_run(a).kernels);
  };
  for (const bool to_chunk : {true, false}) {
    SCOPED_TRACE(to_chunk ? "default -> chunk" : "chunk -> default");
    const std::vector<plan::StepKernel> real = kept(to_chunk ? with(body_flags, chunk) : body_flags);
    const std::vector<plan::StepKernel> body = kept(to_chunk ? body_flags : with(body_flags, chunk));
    const std::vector<plan::StepKernel> head = kept(to_chunk ? with(other_body, chunk) : other_body);
    expect_same_records(plan::with_head_of(body, head), real);
    EXPECT_GT(std::count_if(real.begin(), real.end(), [](const plan::StepKernel& k) { return k.head; }), 2);
  }
}

TEST(CostModel, ALossModesKernelsAreAnotherRunsWithTheHeadReplaced) {
  const std::vector<std::string> base = {
      "--mock-data", "--seq-length",      "32", "--micro-batch-size", "2", "--global-batch-size", "2", "--train-iters",
      "2",           "--lr-warmup-iters", "0",  "--eval-interval",    "0"};
  expect_made_from_parts(
      with(base, {"--model", "tiny-llama"}), {},
      {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"});
  expect_made_from_parts(with(base, {"--model", "tiny-gpt2", "--bf16"}), {"--recompute-modules", "mlp"}, {});
  expect_made_from_parts(
      with(base, {"--model", "tiny-qwen3-moe", "--bf16"}), {"--recompute-modules", "moe"},
      {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"});
  // 8 ranks: context parallel 2, expert parallel 2 (the other body 4) and ZeRO-2 (the other without sharding).
  std::vector<std::string> ranks = base;
  *(std::find(ranks.begin(), ranks.end(), "--global-batch-size") + 1) = "8";  // micro-batch 2 x 4 data-parallel ranks
  expect_made_from_parts(with(ranks, {"--model", "tiny-qwen3-moe", "--bf16", "--context-parallel-size", "2"}),
                         {"--expert-model-parallel-size", "2", "--data-parallel-sharding-strategy", "optim_grads"},
                         {"--expert-model-parallel-size", "4", "--recompute-modules", "moe"}, 8);
}

}  // namespace
}  // namespace tidal::train

namespace tidal::train {
namespace {

// What the search records of a dry run (kept_kernels: merged as they come) is what it would keep of the whole list.
TEST(CostModel, KeptRecordsAreTheWholeListKept) {
  train::TrainArgs a = train::parse_train_args(
      with({"--model", "tiny-qwen3-moe", "--bf16", "--mock-data", "--seq-length", "32", "--micro-batch-size", "2",
            "--global-batch-size", "8", "--train-iters", "2", "--lr-warmup-iters", "0", "--eval-interval", "0"},
           {"--recompute-modules", "moe", "--loss-compute-mode", "chunk", "--loss-chunk-size", "16",
            "--context-parallel-size", "2", "--expert-model-parallel-size", "2"}));
  a.parallel.world = 8;
  const plan::DryRun whole = plan::dry_run(a);
  const plan::DryRun kept = plan::dry_run(a, 0, true);
  const std::vector<plan::StepKernel> expected = plan::kept_for_timing(whole.kernels);
  EXPECT_EQ(kept.recorded_kernels, whole.recorded_kernels);
  EXPECT_EQ(int64_t(whole.kernels.size()), whole.recorded_kernels);
  expect_same_records(kept.kernels, expected);
  for (const plan::StepKernel& k : kept.kernels) EXPECT_TRUE(k.module.empty());
  EXPECT_EQ(kept.device.peak_allocated, whole.device.peak_allocated);
}

}  // namespace
}  // namespace tidal::train
