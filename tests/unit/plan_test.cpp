// tidal plan's greedy choice in the triage order (tidal/plan/triage.h), on the estimator alone.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <set>

#include "tidal/optim/grad_clip.h"

#include "tidal/memory/deepseek_v4_savings.h"
#include "tidal/memory/estimator.h"
#include "tidal/memory/savings.h"
#include "tidal/memory_stats.h"
#include "tidal/models/config.h"
#include "tidal/models/pretrained.h"
#include "tidal/plan/triage.h"
#include "tidal/train/memory_flags.h"

namespace tidal::plan {
namespace {

TriageSettings qwen3_8b_batch(int64_t micro_batch) {
  TriageSettings s;
  s.micro_batch = micro_batch;
  s.seq = 4096;
  s.global_batch = 8;
  return s;
}

const int64_t GiB = int64_t(1) << 30;

TEST(Plan, AConfigurationThatFitsNeedsNoStep) {
  const models::ModelConfig m = models::preset("qwen3-8b");
  const Plan p = make_plan(m, qwen3_8b_batch(1), 400 * GiB);
  EXPECT_TRUE(p.fits);
  EXPECT_TRUE(p.steps.empty());
  EXPECT_EQ(p.target, int64_t(400 * GiB * 0.9));
  EXPECT_EQ(p.start.total, predict_step_peak(m, qwen3_8b_batch(1)).total);
  EXPECT_NE(format_plan(p, m, qwen3_8b_batch(1)).find("It fits the budget"), std::string::npos);
}

TEST(Plan, StepsFollowTheTriageOrderEachLoweringThePeakUntilItFits) {
  const models::ModelConfig m = models::preset("qwen3-8b");
  const TriageSettings s = qwen3_8b_batch(4);
  const Plan p = make_plan(m, s, 80 * GiB);
  ASSERT_TRUE(p.fits);
  ASSERT_GE(p.steps.size(), 2u);
  int64_t prev = p.start.total;
  int group = 0;
  for (const PlanStep& st : p.steps) {
    EXPECT_LT(st.peak, prev) << st.suggestion.flags;                            // every step lowers the prediction
    EXPECT_GE(triage_group(st.suggestion.step), group) << st.suggestion.flags;  // never back in the order
    EXPECT_EQ(st.peak, predict_step_peak(m, st.suggestion.with).total);
    prev = st.peak;
    group = triage_group(st.suggestion.step);
  }
  EXPECT_LE(p.steps.back().peak, p.target);
  EXPECT_GT(p.steps[p.steps.size() - 2].peak, p.target);  // it stops as soon as it fits
  EXPECT_EQ(p.steps.front().suggestion.step, TriageStep::chunked_loss);
  // Each flag once in the command line to add.
  const std::string flags = p.flags();
  for (const char* f : {"--loss-compute-mode", "--recompute-granularity", "--swap-optimizer "}) {
    const size_t at = flags.find(f);
    ASSERT_NE(at, std::string::npos) << flags;
    EXPECT_EQ(flags.find(f, at + 1), std::string::npos) << flags;
  }
}

TEST(Plan, ALaterRecomputeStepReplacesTheEarlierFlags) {
  Plan p;
  Suggestion a{TriageStep::recompute_selective, "--recompute-activation-function --recompute-norm", 1, "", {}};
  Suggestion b{TriageStep::recompute_full,
               "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
               2,
               "",
               {}};
  Suggestion c{TriageStep::chunked_loss, "--loss-compute-mode chunk --loss-chunk-size 1024", 3, "", {}};
  p.steps = {{c, 0}, {a, 0}, {b, 0}};
  EXPECT_EQ(p.flags(),
            "--loss-compute-mode chunk --loss-chunk-size 1024 --recompute-granularity full "
            "--recompute-method uniform --recompute-num-layers 1");
}

TEST(Plan, WhenNothingFitsItSaysSo) {
  const models::ModelConfig m = models::preset("qwen3-8b");
  const Plan p = make_plan(m, qwen3_8b_batch(4), 1 * GiB);
  EXPECT_FALSE(p.fits);
  ASSERT_FALSE(p.steps.empty());
  // What is left is what nothing lowers on one device: the parameters and their gradients.
  EXPECT_GE(p.steps.back().peak, 2 * p.start.parameters);
  EXPECT_TRUE(p.steps.back().suggestion.with.memory.swap_optimizer.on);
  EXPECT_NE(format_plan(p, m, qwen3_8b_batch(4)).find("Even with all of them"), std::string::npos);
  EXPECT_THROW(make_plan(m, qwen3_8b_batch(4), GiB, 1.5), Error);
}

// Under mpirun (tidal plan --data-parallel-size N), sharding is the triage's second step: AdamW's
// states shrink to the largest shard's, the gradient buffer stays (docs/distributed.md).
TEST(Plan, ShardingIsTakenWithSeveralRanksAndExplainedWithOne) {
  const models::ModelConfig m = models::preset("qwen3-8b");
  TriageSettings eight = qwen3_8b_batch(1);
  eight.parallel.world = 8;
  TriageSettings sharded = eight;
  sharded.parallel.sharding = parallel::ShardingStrategy::optim;
  const StepPeak whole = predict_step_peak(m, eight), shard = predict_step_peak(m, sharded);
  // The largest of 8 shards: an eighth of the states, rounded up to the norm's chunk.
  EXPECT_GE(shard.optimizer_states, whole.optimizer_states / 8);
  EXPECT_LE(shard.optimizer_states, whole.optimizer_states / 8 + 8 * optim::kGradNormChunk);
  const Suggestion take = suggest_sharding(m, eight);
  EXPECT_EQ(take.flags, "--use-distributed-optimizer");
  EXPECT_EQ(take.saving, whole.total - shard.total);
  EXPECT_GT(take.saving, 0);
  const Plan p = make_plan(m, eight, 120 * GiB);  // one rank alone would need the swap optimizer
  EXPECT_TRUE(p.fits);
  EXPECT_NE(p.flags().find("--use-distributed-optimizer"), std::string::npos) << p.flags();
  EXPECT_EQ(p.flags().find("--swap-optimizer"), std::string::npos) << p.flags();
  // One rank: nothing to take, and the note says what 8 ranks would hold.
  const Suggestion one = suggest_sharding(m, qwen3_8b_batch(1));
  EXPECT_EQ(one.saving, 0);
  EXPECT_NE(one.note.find("under mpirun -np 8 with --use-distributed-optimizer"), std::string::npos) << one.note;
}

// With one micro-batch per rank every strategy reduce-scatters in place, in the whole gradients (Note
// [Reduce-scatter in place], optim/distributed_adamw.cpp): ZeRO-2's step is ZeRO-1's to the byte. With
// --overlap-grad-reduce every strategy frees each bucket's whole gradients instead, beside the shard's own
// sums; without it ZeRO-2/3 with accumulation do too, synchronously (Note [Synchronous buckets],
// parallel/grad_sync.cpp), unless the model has experts.
TEST(Plan, WithOneMicroBatchPerRankZeRO2IsZeRO1) {
  const models::ModelConfig m = models::preset("qwen3-8b");
  TriageSettings s = qwen3_8b_batch(1);
  s.parallel.world = 8;  // global batch 8: one micro-batch per rank
  s.parallel.sharding = parallel::ShardingStrategy::optim;
  EXPECT_TRUE(s.parallel.reduces_in_place(1));
  const StepPeak zero1 = predict_step_peak(m, s);
  s.parallel.sharding = parallel::ShardingStrategy::optim_grads;
  EXPECT_TRUE(s.parallel.reduces_in_place(1));
  EXPECT_FALSE(s.parallel.reduces_in_place(2));
  EXPECT_EQ(predict_step_peak(m, s).total, zero1.total);
  EXPECT_FALSE(s.parallel.reduces_by_bucket(1, false));
  EXPECT_TRUE(s.parallel.reduces_by_bucket(2, false));
  EXPECT_FALSE(s.parallel.reduces_by_bucket(2, true));  // experts: after backward
  s.parallel.overlap_grad_reduce = true;
  EXPECT_FALSE(s.parallel.reduces_in_place(1));
  EXPECT_TRUE(s.parallel.reduces_by_bucket(1, true));
  s.parallel.sharding = parallel::ShardingStrategy::optim;
  EXPECT_FALSE(s.parallel.reduces_in_place(1));  // ZeRO-1 with overlap frees each bucket too
  EXPECT_FALSE(s.parallel.reduces_in_place(2));
  s.parallel.overlap_grad_reduce = false;
  EXPECT_TRUE(s.parallel.reduces_in_place(2));  // ZeRO-1 reduces once, after its last micro-batch
  EXPECT_FALSE(s.parallel.reduces_by_bucket(2, false));
}

// A model too large for ZeRO-1 on its ranks (Qwen3-30B-A3B, 16 ranks of 80 GB, sequence 4096): the
// plan shards the parameters too, with the gradients freed bucket by bucket, then takes chunked loss
// and selective recompute — and fits (docs/distributed.md, issue 17's worked example in part).
TEST(Plan, ZeRO3WithOverlappedReductionMakesAThirtyBillionMoEFit) {
  const models::ModelConfig m = models::preset("qwen3-30b-a3b");
  TriageSettings s = qwen3_8b_batch(1);
  s.parallel.world = 16;
  s.parallel.bucket_size = 40000000;  // Megatron's default at 16 ranks
  s.parallel.sharding = parallel::ShardingStrategy::optim;
  const Suggestion take = suggest_sharding(m, s);
  EXPECT_EQ(take.flags, "--overlap-grad-reduce --data-parallel-sharding-strategy optim_grads_params");
  EXPECT_GT(take.saving, 0);
  // ZeRO-3 keeps a 16th of the parameters, the outer ones and a layer's (no longer the whole model).
  EXPECT_LT(predict_step_peak(m, take.with).parameters, predict_step_peak(m, s).parameters / 8);
  const Plan p = make_plan(m, s, 80 * GiB);
  EXPECT_TRUE(p.fits) << format_plan(p, m, s);
  EXPECT_NE(p.flags().find("--data-parallel-sharding-strategy optim_grads_params"), std::string::npos) << p.flags();
  EXPECT_EQ(p.flags().find("--swap-optimizer"), std::string::npos) << p.flags();
}

// Expert and context parallelism in the triage: after sharding, before recompute, at the largest size
// tidal train runs (E without sharding for now; C for dense models with flash attention).
TEST(Plan, ExpertAndContextParallelismComeAfterShardingAndBeforeRecompute) {
  const models::ModelConfig moe = models::preset("qwen3-30b-a3b");
  TriageSettings s = qwen3_8b_batch(1);
  s.seq = 32768;
  s.parallel.world = 16;
  std::vector<Suggestion> ep = suggest_parallel(moe, s);
  ASSERT_EQ(ep.size(), 2u);  // expert parallel, then context parallel (MoE models run it too)
  EXPECT_EQ(ep[0].step, TriageStep::expert_parallel);
  EXPECT_EQ(ep[0].flags, "--expert-model-parallel-size 16");
  EXPECT_EQ(ep[0].with.parallel.expert, 16);
  EXPECT_GT(ep[0].saving, 0);
  EXPECT_EQ(ep[1].step, TriageStep::context_parallel);
  EXPECT_EQ(ep[1].flags, "--context-parallel-size 16");
  EXPECT_EQ(triage_group(TriageStep::expert_parallel), 2);
  s.parallel.sharding = parallel::ShardingStrategy::optim;  // expert parallelism runs sharded too
  ASSERT_FALSE(suggest_parallel(moe, s).empty());
  EXPECT_EQ(suggest_parallel(moe, s)[0].flags, "--expert-model-parallel-size 16");
  const models::ModelConfig dense = models::preset("qwen3-8b");
  TriageSettings d = qwen3_8b_batch(1);
  d.seq = 32768;
  d.parallel.world = 8;
  d.parallel.sharding = parallel::ShardingStrategy::optim_grads_params;
  d.parallel.overlap_grad_reduce = true;
  const std::vector<Suggestion> cp = suggest_parallel(dense, d);
  ASSERT_EQ(cp.size(), 1u);
  EXPECT_EQ(cp[0].flags, "--context-parallel-size 8");
  EXPECT_EQ(predict_step_peak(dense, cp[0].with).logits, predict_step_peak(dense, d).logits / 8);
  d.attention = AttentionKernel::eager;  // eager runs under CP too (all-gathered K/V)
  ASSERT_EQ(suggest_parallel(dense, d).size(), 1u);
  EXPECT_EQ(suggest_parallel(dense, d)[0].flags, "--context-parallel-size 8");
  d.attention = AttentionKernel::flash;
  // The plan takes ZeRO-3 (already on), then context parallelism, before any recompute.
  const Plan p = make_plan(dense, d, 80 * GiB);
  ASSERT_FALSE(p.steps.empty()) << format_plan(p, dense, d);
  size_t at = 0;
  while (at < p.steps.size() && p.steps[at].suggestion.step != TriageStep::context_parallel) ++at;
  ASSERT_LT(at, p.steps.size()) << format_plan(p, dense, d);
  for (size_t i = 0; i < at; ++i) EXPECT_LE(triage_group(p.steps[i].suggestion.step), 2) << p.steps[i].suggestion.flags;
}

// Offered at their largest size (the OOM advice's, the search's candidates), expert and context parallelism go
// into the greedy plan at the smallest size that is enough: fewer ranks in each exchange. Qwen3-30B-A3B on 16
// ranks of 80 GB (docs/distributed.md): context parallel 2 is enough after ZeRO-3 and the chunked loss.
TEST(Plan, TheGreedyTakesTheSmallestParallelSizeThatIsEnough) {
  const models::ModelConfig moe = models::preset("qwen3-30b-a3b");
  TriageSettings s = qwen3_8b_batch(1);
  s.global_batch = 16;
  s.parallel.world = 16;
  s.parallel.sharding = parallel::ShardingStrategy::optim;
  const Plan p = make_plan(moe, s, 80 * GiB);
  ASSERT_TRUE(p.fits) << format_plan(p, moe, s);
  const PlanStep& last = p.steps.back();
  ASSERT_EQ(last.suggestion.step, TriageStep::context_parallel) << format_plan(p, moe, s);
  const int n = last.suggestion.with.parallel.context;
  EXPECT_EQ(last.suggestion.flags, "--context-parallel-size " + std::to_string(n));
  EXPECT_LT(n, 16) << "the widest size was taken where a smaller one is enough";
  // Every smaller size would not be enough (or does not run).
  TriageSettings before = last.suggestion.with;
  before.parallel.context = 1;
  const int64_t peak = predict_step_peak(moe, before).total;
  for (int k = 2; k < n; ++k) {
    const std::optional<Suggestion> x = suggest_parallel_size(moe, before, TriageStep::context_parallel, k);
    if (x) {
      EXPECT_GT(peak - x->saving, p.target) << k;
    }
  }
  EXPECT_LE(last.peak, p.target);
  // The triage still offers the widest.
  const std::vector<Suggestion> offered = suggest_parallel(moe, before);
  ASSERT_FALSE(offered.empty());
  EXPECT_EQ(offered.back().flags, "--context-parallel-size 16");
}

// DeepSeek-V4 at its real size: transformers 5.25's default DeepseekV4Config (V4-Flash's sizes, 284,325,869,015
// parameters; tests/fixtures/hf/published/v5/deepseek-v4-default.json, saved by transformers) planned for 64 ranks of
// 80 GB at 4096 tokens in bf16: ZeRO-3, full recompute, offload and the swap optimizer make it fit (expert
// parallelism is offered after sharding, the triage's order; context parallelism tidal does not run for V4 yet).
TEST(Plan, DeepSeekV4AtItsRealSizePlansOnSixtyFourRanks) {
  const models::ModelConfig v4 =
      models::load_config(std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/hf/published/v5/deepseek-v4-default.json");
  ASSERT_TRUE(v4.is_deepseek_v4());
  TriageSettings s = qwen3_8b_batch(1);
  s.global_batch = 64;
  s.parallel.world = 64;
  s.precision.bf16 = true;
  // bf16 parameters, every rank whole, plus the buffers counted with them: the 3 hash-routed layers' tid2eid tables
  // (vocabulary x top-6, i64) and the other 40 layers' f32 correction biases (256 experts).
  EXPECT_EQ(predict_step_peak(v4, s).parameters, 2 * int64_t(284325869015) + 3 * 129280 * 6 * 8 + 40 * 256 * 4);
  const Plan p = make_plan(v4, s, 80 * GiB);
  EXPECT_TRUE(p.fits) << format_plan(p, v4, s);
  std::set<TriageStep> taken;
  for (const PlanStep& st : p.steps) taken.insert(st.suggestion.step);
  EXPECT_TRUE(taken.count(TriageStep::sharding)) << format_plan(p, v4, s);
  EXPECT_FALSE(taken.count(TriageStep::context_parallel)) << format_plan(p, v4, s);
}

// DeepSeek-V4-Pro at its real size (tests/fixtures/hf/published/v5/deepseek-v4-pro.json: the published model card's
// values, docs/models.md): 1.6T parameters of which 49B active (6 of 384 experts a token), planned for 512 ranks of
// 80 GB at 4096 tokens in bf16. Expert parallelism takes the experts off each rank (every rank holding them whole
// would need 3 TiB of bf16 weights alone), and the plan fits.
TEST(Plan, DeepSeekV4ProAtItsRealSizePlansWithExpertParallelism) {
  const models::ModelConfig v4 =
      models::load_config(std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/hf/published/v5/deepseek-v4-pro.json");
  ASSERT_TRUE(v4.is_deepseek_v4());
  EXPECT_EQ(v4.num_experts, 384);
  const int64_t total = v4.parameter_count();
  const int64_t routed_idle = v4.num_hidden_layers * (v4.num_experts - v4.num_experts_per_tok) * 3 * v4.hidden_size *
                              v4.moe_intermediate_size;  // the routed experts a token does not use
  EXPECT_NEAR(double(total) / 1e12, 1.6, 0.05) << total;
  EXPECT_NEAR(double(total - routed_idle) / 1e9, 49, 2) << total - routed_idle;
  TriageSettings s = qwen3_8b_batch(1);
  s.global_batch = 512;
  s.parallel.world = 512;
  s.precision.bf16 = true;
  const Plan p = make_plan(v4, s, 80 * GiB);
  EXPECT_TRUE(p.fits) << format_plan(p, v4, s);
  std::set<TriageStep> taken;
  for (const PlanStep& st : p.steps) taken.insert(st.suggestion.step);
  EXPECT_TRUE(taken.count(TriageStep::sharding)) << format_plan(p, v4, s);
  EXPECT_TRUE(taken.count(TriageStep::expert_parallel)) << format_plan(p, v4, s);
  if (std::getenv("TIDAL_PRINT_PLAN"))
    std::printf("%lld parameters, %lld active\n%s\n", (long long)total, (long long)(total - routed_idle),
                format_plan(p, v4, s).c_str());
}

// --bf16 (Megatron's 18 bytes per parameter): 2-byte parameters, the same f32 gradients, 12 bytes of
// AdamW state (an f32 master weight beside the two moments), bf16 activations and logits — whole,
// sharded over ranks, ZeRO-3's gathered layers and the swap optimizer's windows alike.
TEST(Plan, Bf16PredictsBf16ParametersAndActivationsAndTwelveBytesOfState) {
  const models::ModelConfig m = models::preset("qwen3-8b");
  TriageSettings s = qwen3_8b_batch(1);
  TriageSettings b = s;
  b.precision.bf16 = true;
  const StepPeak f32 = predict_step_peak(m, s), bf16 = predict_step_peak(m, b);
  const int64_t params = f32.parameters / 4;
  EXPECT_EQ(f32.optimizer_states, 8 * params);
  EXPECT_EQ(bf16.parameters, 2 * params);
  EXPECT_EQ(bf16.optimizer_states, 12 * params);
  EXPECT_EQ(bf16.logits, 2 * 4096 * m.vocab_size * 2);  // the logits and their gradient, bf16
  EXPECT_EQ(f32.logits, 2 * 4096 * m.vocab_size * 4);
  EXPECT_EQ(
      bf16.activations,
      memory::estimate_activations(m, memory::activation_inputs(b.memory, 1, 4096, b.attention, DType::bf16)).peak);
  EXPECT_LT(bf16.activations, f32.activations * 6 / 10);  // about half: the statistics stay f32
  EXPECT_GT(bf16.activations, f32.activations / 2);
  EXPECT_NE(oom_advice(m, b).find("bf16 mixed precision"), std::string::npos);
  // Sharded over 8 ranks: the same elements at 2 and 12 bytes instead of 4 and 8.
  for (const parallel::ShardingStrategy strategy :
       {parallel::ShardingStrategy::optim, parallel::ShardingStrategy::optim_grads,
        parallel::ShardingStrategy::optim_grads_params}) {
    TriageSettings s8 = s;
    s8.parallel.world = 8;
    s8.parallel.sharding = strategy;
    TriageSettings b8 = s8;
    b8.precision.bf16 = true;
    const StepPeak f = predict_step_peak(m, s8), h = predict_step_peak(m, b8);
    EXPECT_EQ(2 * h.parameters, f.parameters) << int(strategy);
    EXPECT_EQ(8 * h.optimizer_states, 12 * f.optimizer_states) << int(strategy);
    EXPECT_LT(h.parameters, f.parameters) << int(strategy);
  }
  // The swap optimizer's two windows of 12-byte elements: K = 1 of a single 10^6-element parameter
  // holds all of them during the step.
  TriageSettings swap = b;
  swap.num_parameters = 1000000;
  swap.memory.swap_optimizer = {true, 1};
  EXPECT_EQ(predict_step_peak(m, swap).optimizer_states, 12 * 1000000);
  EXPECT_EQ(predict_step_peak(m, swap).parameters, 2 * 1000000);
  swap.precision.bf16 = false;
  EXPECT_EQ(predict_step_peak(m, swap).optimizer_states, 8 * 1000000);
  const std::optional<Suggestion> swapping = suggest_swap_optimizer(m, b);
  ASSERT_TRUE(swapping.has_value());
  EXPECT_NE(swapping->note.find("AdamW's f32 master weights and moments (" + format_bytes(12 * params) + ")"),
            std::string::npos)
      << swapping->note;
  // Chunked loss computes in f32: f32 copies of the (V, C) weight and its f32 gradient during forward.
  // At one sequence of 4096 tokens that is more than the bf16 logits it saves (8VC > 4NV), not in f32;
  // at four sequences it saves, and the logits left are one f32 chunk.
  EXPECT_LT(memory::chunked_loss_savings(1, 4096, m.hidden_size, m.vocab_size, 1024, DType::bf16), 0);
  EXPECT_GT(memory::chunked_loss_savings(1, 4096, m.hidden_size, m.vocab_size, 1024), 0);
  TriageSettings b4 = qwen3_8b_batch(4);
  b4.precision.bf16 = true;
  const std::optional<Suggestion> chunk = suggest_chunked_loss(m, b4);
  ASSERT_TRUE(chunk.has_value());
  EXPECT_NE(chunk->note.find("4 x 4096 x 151936 bf16 logits (" + format_bytes(4 * 4096 * m.vocab_size * 2) + ")"),
            std::string::npos)
      << chunk->note;
  EXPECT_EQ(predict_step_peak(m, chunk->with).logits,
            memory::chunked_loss_logits_bytes(4, 4096, m.vocab_size, 1024, 4));
}

TEST(Plan, ThePredictionIsTheEstimatorsWhateverWasPredictedBeforeAndInAnyOrder) {
  // predict_step_peak keeps each model's activation estimates by their inputs (a search predicts 10^5
  // candidates of one model): what it returns is still the estimator's for the candidate's own inputs —
  // candidates that differ in each input the estimator reads, and in what it does not (sharding), predicted
  // twice, the second time in reverse order (every estimate then comes from the memo).
  const models::ModelConfig m = models::preset("qwen3-30b-a3b");
  const std::vector<std::vector<std::string>> memory_flags = {
      {},
      {"--recompute-activation-function"},
      {"--recompute-norm"},
      {"--recompute-modules", "moe"},
      {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "2"},
      {"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "5"},
      {"--activation-offload"},
      {"--activation-offload", "--offload-policy", "core-attn"},
      {"--activation-offload", "--offload-policy", "min-bytes=1048576"},
      {"--activation-offload", "--offload-prefetch-depth", "2"},
      {"--loss-compute-mode", "chunk", "--loss-chunk-size", "1024"}};
  std::vector<TriageSettings> all;
  for (const std::vector<std::string>& flags : memory_flags)
    for (const int expert : {1, 8})
      for (const int context : {1, 2})
        for (const int64_t micro : {1, 2})
          for (const bool bf16 : {false, true})
            for (const AttentionKernel kernel : {AttentionKernel::flash, AttentionKernel::eager})
              for (const parallel::ShardingStrategy sharding :
                   {parallel::ShardingStrategy::no_shard, parallel::ShardingStrategy::optim_grads}) {
                TriageSettings s;
                s.seq = 4096;
                s.micro_batch = micro;
                s.global_batch = 8 * micro;
                s.attention = kernel;
                s.precision.bf16 = bf16;
                s.parallel.world = 8;
                s.parallel.expert = expert;
                s.parallel.context = context;
                s.parallel.sharding = sharding;
                s.memory = train::parse_memory_config(flags, m);
                all.push_back(s);
              }
  const auto estimator = [&](const TriageSettings& s) {
    memory::ActivationInputs in = memory::activation_inputs(s.memory, s.micro_batch, s.seq / s.parallel.context,
                                                            s.attention, s.precision.param_dtype());
    in.parallel = s.parallel;
    return memory::estimate_activations(m, in).peak;
  };
  std::set<int64_t> distinct;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t k = 0; k < all.size(); ++k) {
      const TriageSettings& s = all[pass == 0 ? k : all.size() - 1 - k];
      const int64_t expected = estimator(s);
      ASSERT_EQ(predict_step_peak(m, s).activations, expected)
          << "pass " << pass << ": " << testing::PrintToString(train::memory_config_flags(s.memory)) << " E "
          << s.parallel.expert << " C " << s.parallel.context << " micro " << s.micro_batch
          << (s.precision.bf16 ? " bf16 " : " f32 ") << name(s.attention);
      distinct.insert(expected);
    }
  }
  EXPECT_GT(distinct.size(), all.size() / 4);  // the inputs do change the estimate
}

// DeepSeek-V4: the advice is the estimator's, and its recompute step names V4's own flags that are not on, with what
// they take off the peak and off the activations kept after forward (memory/deepseek_v4_savings.h); expert
// parallelism too, never context parallelism, which V4 refuses.
TEST(OomAdvice, DeepSeekV4SuggestsItsOwnRecomputeFlags) {
  const models::ModelConfig m =
      models::load_pretrained_dir(TIDAL_SOURCE_DIR "/tests/fixtures/hf/tiny_deepseek_v4_csa").config;
  TriageSettings s;
  s.micro_batch = 2;
  s.seq = 32;
  s.parallel.world = 4;
  std::string advice = oom_advice(m, s);
  int64_t csa = 0;
  for (int64_t l = 0; l < 3; ++l) csa += memory::csa_attention_saving(m, l, 2, 32, DType::f32, s.attention);
  EXPECT_NE(advice.find("needs about " + format_bytes(predict_step_peak(m, s).total)), std::string::npos) << advice;
  EXPECT_NE(advice.find("--recompute-csa-attention would save"), std::string::npos) << advice;
  EXPECT_NE(advice.find("; " + format_bytes(csa) + " less kept after forward"), std::string::npos) << advice;
  EXPECT_NE(advice.find("--mhc-recompute would save"), std::string::npos) << advice;
  EXPECT_NE(advice.find("; " + format_bytes(3 * memory::mhc_saving(m, 2, 32, DType::f32)) + " less kept after forward"),
            std::string::npos)
      << advice;
  EXPECT_NE(advice.find("--expert-model-parallel-size 4 would save"), std::string::npos) << advice;  // 1 expert a rank
  EXPECT_EQ(advice.find("--context-parallel-size"), std::string::npos) << advice;
  EXPECT_EQ(advice.find("--recompute-activation-function"), std::string::npos) << advice;
  // On already: not suggested again; under full block 1 the other layers' bytes.
  memory::RecomputeConfig r;
  r.granularity = memory::Granularity::full;
  r.method = memory::RecomputeMethod::block;
  r.num_layers = 1;
  r.csa_attention = true;
  s.memory.set_recompute(r, m);
  advice = oom_advice(m, s);
  EXPECT_EQ(advice.find("--recompute-csa-attention would"), std::string::npos) << advice;
  EXPECT_NE(advice.find("; " + format_bytes(2 * memory::mhc_saving(m, 2, 32, DType::f32)) + " less kept after forward"),
            std::string::npos)
      << advice;
  EXPECT_NE(advice.find("recompute full block 1 + csa-attention"), std::string::npos) << advice;
  // Full uniform recompute leaves them nothing to do.
  r = {};
  r.granularity = memory::Granularity::full;
  r.method = memory::RecomputeMethod::uniform;
  r.num_layers = 1;
  s.memory.set_recompute(r, m);
  EXPECT_EQ(oom_advice(m, s).find("less kept after forward"), std::string::npos);
}

}  // namespace
}  // namespace tidal::plan
