#include "tidal/plan/candidates.h"

#include <algorithm>

#include "tidal/base/error.h"
#include "tidal/parallel/expert.h"
#include "tidal/train/memory_flags.h"

namespace tidal::plan {
namespace {

using memory::Granularity;
using memory::RecomputeConfig;
using memory::RecomputeMethod;
using memory::RecomputeModule;

RecomputeConfig full(RecomputeMethod method, int64_t n) {
  RecomputeConfig c;
  c.granularity = Granularity::full;
  c.method = method;
  c.num_layers = n;
  return c;
}

// 1 .. n-1: every value up to 16, then about x1.5 apart.
std::vector<int64_t> block_sizes(int64_t layers) {
  std::vector<int64_t> out;
  for (int64_t n = 1; n < layers; n = n < 16 ? n + 1 : n * 3 / 2) out.push_back(n);
  return out;
}

bool valid(const RecomputeConfig& c, const models::ModelConfig& m) {
  try {
    memory::validate_recompute(c, m);
    return true;
  } catch (const Error&) {
    return false;
  }
}

template <typename T>
void add_unique(std::vector<T>& v, const T& x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

// Micro-batch sizes that divide a rank's share of the global batch: the given one and its powers of
// two either way (larger ones accumulate less).
std::vector<int64_t> micro_batches(const train::TrainArgs& g, int ranks) {
  const int64_t per_rank = g.global_batch_size / ranks;
  std::vector<int64_t> out = {g.micro_batch_size};
  for (int64_t d = g.micro_batch_size / 2; d >= 1; d /= 2)
    if (per_rank % d == 0) out.push_back(d);
  for (int64_t d = g.micro_batch_size * 2; d <= per_rank; d *= 2)
    if (per_rank % d == 0) out.push_back(d);
  return out;
}

std::vector<memory::OffloadConfig> offload_options(const memory::OffloadConfig& given, const std::string& disk_dir) {
  std::vector<memory::OffloadConfig> out;
  add_unique(out, given);
  add_unique(out, memory::OffloadConfig{});
  using memory::OffloadPolicyKind;
  for (auto [kind, depth] :
       {std::pair{OffloadPolicyKind::all, 1}, std::pair{OffloadPolicyKind::all, 2},
        std::pair{OffloadPolicyKind::layer_input, 1}, std::pair{OffloadPolicyKind::core_attn, 1}}) {
    memory::OffloadConfig o;
    o.enabled = true;
    o.policy.kind = kind;
    o.prefetch_depth = depth;
    add_unique(out, o);
  }
  if (!disk_dir.empty()) {  // the disk tier: offloaded tensors in a spill file, staged through host buffers
    for (OffloadPolicyKind kind : {OffloadPolicyKind::all, OffloadPolicyKind::layer_input}) {
      memory::OffloadConfig o;
      o.enabled = true;
      o.policy.kind = kind;
      o.target = memory::OffloadTarget::disk;
      o.dir = disk_dir;
      add_unique(out, o);
    }
  }
  return out;
}

// Sharding strategies, each with gradients reduced after backward or bucket by bucket during it
// (--overlap-grad-reduce: under ZeRO-2/3 a bucket's full gradients are freed once reduced).
// LoRA: not ZeRO-3 (train/arguments.cpp refuses it).
std::vector<std::pair<parallel::ShardingStrategy, bool>> sharding_options(const parallel::ParallelLayout& given,
                                                                          int ranks, bool lora) {
  std::vector<std::pair<parallel::ShardingStrategy, bool>> out = {{given.sharding, given.overlap_grad_reduce}};
  if (ranks > 1)
    for (parallel::ShardingStrategy s :
         {parallel::ShardingStrategy::no_shard, parallel::ShardingStrategy::optim,
          parallel::ShardingStrategy::optim_grads, parallel::ShardingStrategy::optim_grads_params})
      for (bool overlap : {given.overlap_grad_reduce, true})
        if (!lora || s != parallel::ShardingStrategy::optim_grads_params) add_unique(out, std::pair{s, overlap});
  return out;
}

// Expert-parallel sizes: the given one when > 1 (kept), else for a MoE model every E dividing its experts
// and the ranks (1 first).
std::vector<int> expert_parallel_options(const train::TrainArgs& g, int ranks) {
  if (g.parallel.expert > 1 || !g.model.is_moe()) return {g.parallel.expert};
  std::vector<int> out;
  for (int e = 1; e <= ranks; ++e)
    if (ranks % e == 0 && g.model.num_experts % e == 0) out.push_back(e);
  return out;
}

// Context-parallel sizes: the given one when > 1 (kept), else every C dividing the ranks whose 2C chunks
// divide the sequence (1 first); check_context_parallel then takes out what does not run yet.
std::vector<int> context_parallel_options(const train::TrainArgs& g, int ranks) {
  // deepseek_v4 runs without context parallelism (models/deepseek_v4.h).
  if (g.parallel.context > 1 || g.model.is_deepseek_v4()) return {g.parallel.context};
  std::vector<int> out;
  for (int c = 1; c <= ranks; ++c)
    if (ranks % c == 0 && g.seq_length % (2 * c) == 0) out.push_back(c);
  return out;
}

// The (E, C) pairs to search: E x C divides the ranks, and check_context_parallel does not refuse the
// run as given.
std::vector<std::pair<int, int>> parallel_options(const train::TrainArgs& g, int ranks) {
  std::vector<std::pair<int, int>> out;
  for (int e : expert_parallel_options(g, ranks)) {
    for (int c : context_parallel_options(g, ranks)) {
      // E x C dividing the ranks: tidal train runs any E and C that divide them (EP groups are carved
      // from all DP x C ranks), but the search keeps to the pairs that tile them, as Megatron's grids
      // do, which keeps it to minutes for a 16-rank MoE plan (every pair made it 5x larger).
      if (ranks % (int64_t(e) * c) != 0) continue;
      parallel::ParallelLayout l = g.parallel;
      l.context = c;
      try {
        parallel::check_context_parallel(l, g.seq_length);
      } catch (const Error&) {
        continue;
      }
      out.push_back({e, c});
    }
  }
  return out;
}

// Whether `tidal train` runs expert parallel E and context parallel C of `a` on `ranks` ranks.
bool runs_parallel(const train::TrainArgs& a) {
  if (a.parallel.world % a.parallel.context != 0) return false;
  if (a.model.is_deepseek_v4() && a.parallel.context != 1) return false;  // models/deepseek_v4.h
  try {
    parallel::check_expert_parallel(a.parallel, a.model);
    parallel::check_context_parallel(a.parallel, a.seq_length);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

std::vector<RecomputeConfig> recompute_ladder(const models::ModelConfig& m, AttentionKernel attention) {
  std::vector<RecomputeConfig> rungs;
  auto add = [&](const RecomputeConfig& c) {
    if (valid(c, m)) add_unique(rungs, c);
  };
  add(RecomputeConfig{});
  RecomputeConfig act;
  act.activation_function = true;
  add(act);
  RecomputeConfig act_norm = act;
  act_norm.norm = true;
  add(act_norm);
  std::vector<std::vector<RecomputeModule>> module_sets;
  // DeepSeek-V4's core keeps its parts' outputs and merge weights with the flash kernel too.
  if (attention == AttentionKernel::eager || m.is_deepseek_v4()) module_sets.push_back({RecomputeModule::core_attn});
  if (m.is_moe()) {
    module_sets.push_back({RecomputeModule::mlp, RecomputeModule::moe_act});
    module_sets.push_back({RecomputeModule::mlp, RecomputeModule::moe});
  } else {
    module_sets.push_back({RecomputeModule::mlp});
  }
  if (m.is_mla()) {  // MLA's up-projections, alone and beside each set above
    const size_t n = module_sets.size();
    for (size_t i = 0; i < n; ++i) {
      module_sets.push_back(module_sets[i]);
      module_sets.back().push_back(RecomputeModule::mla_up_proj);
    }
    module_sets.push_back({RecomputeModule::mla_up_proj});
  }
  for (const auto& modules : module_sets) {
    RecomputeConfig c;
    c.granularity = Granularity::selective;
    c.modules = modules;
    add(c);
    if (!m.is_moe()) continue;
    c.modules.erase(c.modules.begin());  // a model whose every layer is MoE refuses mlp
    add(c);
  }
  if (m.is_deepseek_v4()) {  // its own flags, alone and beside its checkpoints (validate refuses them without a
                             // compressed layer, and under full uniform recompute)
    for (const std::vector<RecomputeModule>& modules :
         std::vector<std::vector<RecomputeModule>>{{},
                                                   {RecomputeModule::core_attn},
                                                   {RecomputeModule::moe},
                                                   {RecomputeModule::core_attn, RecomputeModule::moe}})
      for (const auto& [csa, mhc] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
        RecomputeConfig c;
        c.granularity = modules.empty() ? Granularity::none : Granularity::selective;
        c.modules = modules;
        c.csa_attention = csa;
        c.mhc = mhc;
        add(c);
      }
  }
  for (int64_t n : block_sizes(m.num_hidden_layers)) {
    add(full(RecomputeMethod::block, n));
    if (!m.is_deepseek_v4()) continue;
    RecomputeConfig c = full(RecomputeMethod::block, n);  // the layers after the n: DeepSeek-V4's flags
    c.csa_attention = c.mhc = true;
    add(c);
    c.csa_attention = false;
    add(c);
  }
  for (int64_t n : {1, 2, 4})  // groups of n layers: fewer checkpoints, a larger replay
    if (n == 1 || m.num_hidden_layers >= 2 * n) add(full(RecomputeMethod::uniform, n));
  return rungs;
}

std::string changed_flags(const train::TrainArgs& given, const train::TrainArgs& c) {
  std::vector<std::string> words;
  if (!(given.memory == c.memory)) {
    const std::vector<std::string> memory = train::memory_config_flags(c.memory);
    words.insert(words.end(), memory.begin(), memory.end());
  }
  if (given.attention != c.attention) words.insert(words.end(), {"--attention", name(c.attention)});
  if (given.micro_batch_size != c.micro_batch_size)
    words.insert(words.end(), {"--micro-batch-size", std::to_string(c.micro_batch_size), "--global-batch-size",
                               std::to_string(c.global_batch_size)});
  if (given.parallel.sharding != c.parallel.sharding)
    words.insert(words.end(), {"--data-parallel-sharding-strategy", parallel::sharding_name(c.parallel.sharding)});
  if (given.parallel.overlap_grad_reduce != c.parallel.overlap_grad_reduce && c.parallel.overlap_grad_reduce)
    words.push_back("--overlap-grad-reduce");
  if (given.parallel.overlap_param_gather != c.parallel.overlap_param_gather && c.parallel.overlap_param_gather)
    words.push_back("--overlap-param-gather");
  if (given.parallel.expert != c.parallel.expert)
    words.insert(words.end(), {"--expert-model-parallel-size", std::to_string(c.parallel.expert)});
  if (given.parallel.context != c.parallel.context)
    words.insert(words.end(), {"--context-parallel-size", std::to_string(c.parallel.context)});
  return train::join_flags(words);
}

std::vector<CandidateConfig> enumerate_candidates(const train::TrainArgs& given, const std::string& disk_dir) {
  std::vector<CandidateConfig> out;
  const int data_parallel = given.parallel.world;
  out.push_back({given, "", 0, given.memory.recompute.any() ? given.memory.recompute.describe() : "none"});
  std::vector<AttentionKernel> attentions = {given.attention};
  add_unique(attentions, AttentionKernel::flash);
  for (const AttentionKernel attention : attentions) {
    std::vector<RecomputeConfig> ladder = recompute_ladder(given.model, attention);
    add_unique(ladder, given.memory.recompute);
    for (const auto& [ep, cp] : parallel_options(given, data_parallel))
      for (int64_t mb : micro_batches(given, data_parallel / cp)) {
        std::vector<memory::LossComputeConfig> losses = {given.memory.loss};
        // Chunks of min(1024, tokens / 4) (the advice's), and larger ones of min(4096, tokens / 2) (faster
        // LM-head products, a larger chunk of logits).
        const int64_t tokens = mb * given.seq_length;
        add_unique(losses, memory::LossComputeConfig{true, std::min<int64_t>(1024, std::max<int64_t>(1, tokens / 4))});
        add_unique(losses, memory::LossComputeConfig{true, std::min<int64_t>(4096, std::max<int64_t>(1, tokens / 2))});
        for (const auto& [sharding, overlap_grad_reduce] :
             sharding_options(given.parallel, data_parallel, given.lora.enabled())) {
          for (const memory::LossComputeConfig& loss : losses) {
            for (const memory::OffloadConfig& offload : offload_options(given.memory.offload, disk_dir)) {
              std::vector<memory::SwapOptimizerConfig> swaps = {given.memory.swap_optimizer};
              add_unique(swaps, memory::SwapOptimizerConfig{});
              add_unique(swaps, memory::SwapOptimizerConfig{true, -1});  // 16 windows
              add_unique(swaps, memory::SwapOptimizerConfig{true, 4});   // fewer, larger windows
              for (const memory::SwapOptimizerConfig& swap : swaps) {
                for (size_t rung = 0; rung < ladder.size(); ++rung) {
                  memory::MemoryConfig mc;
                  mc.recompute = ladder[rung];
                  mc.offload = offload;
                  mc.loss = loss;
                  mc.swap_optimizer = swap;
                  CandidateConfig c{given, "", int(rung), ladder[rung].any() ? ladder[rung].describe() : "none"};
                  try {  // validated as tidal train validates its flags
                    train::validate_memory_config(mc, given.model);
                  } catch (const Error&) {
                    continue;
                  }
                  c.args.memory = std::move(mc);
                  c.args.attention = attention;
                  c.args.micro_batch_size = mb;
                  c.args.parallel.expert = ep;
                  c.args.parallel.context = cp;
                  c.args.parallel.sharding = sharding;
                  c.args.parallel.overlap_grad_reduce = overlap_grad_reduce;
                  c.args.parallel.overlap_param_gather =
                      sharding == parallel::ShardingStrategy::optim_grads_params && given.parallel.overlap_param_gather;
                  c.flags = changed_flags(given, c.args);
                  if (c.flags.empty()) continue;  // the given configuration, already candidate 0
                  if ((ep > 1 || cp > 1) && !runs_parallel(c.args)) continue;
                  out.push_back(std::move(c));
                }
              }
            }
          }
        }
      }
  }
  return out;
}

}  // namespace tidal::plan
