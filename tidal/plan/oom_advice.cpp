#include "tidal/plan/oom_advice.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "tidal/memory/deepseek_v4_savings.h"
#include "tidal/memory/estimator.h"
#include "tidal/memory/savings.h"
#include "tidal/memory/swap_optimizer.h"
#include "tidal/models/causal_lm.h"
#include "tidal/models/config.h"
#include "tidal/models/moe.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/optim/shard_layout.h"
#include "tidal/parallel/context.h"
#include "tidal/parallel/expert.h"
#include "tidal/train/memory_flags.h"

namespace tidal::plan {
namespace {

// The flags of one part of a configuration (train/memory_flags.h), e.g. only its offload settings.
template <class Part>
std::string flags_of(Part memory::MemoryConfig::*part, const Part& value) {
  memory::MemoryConfig c;
  c.*part = value;
  return train::join_flags(train::memory_config_flags(c));
}

// How much predict_step_peak drops from `s` to `t` (the same settings with one change).
int64_t saving(const models::ModelConfig& m, const TriageSettings& s, const TriageSettings& t) {
  return predict_step_peak(m, s).total - predict_step_peak(m, t).total;
}

std::string shape_str(int64_t b, int64_t s, int64_t v) {
  return std::to_string(b) + " x " + std::to_string(s) + " x " + std::to_string(v);
}

}  // namespace

std::optional<Suggestion> suggest_chunked_loss(const models::ModelConfig& m, const TriageSettings& s) {
  if (s.memory.loss.chunked) return std::nullopt;
  const int64_t tokens = s.micro_batch * s.seq;
  TriageSettings t = s;
  t.memory.loss = {true, std::min<int64_t>(1024, std::max<int64_t>(1, tokens / 4))};
  const int64_t saved = saving(m, s, t);
  if (saved <= 0) return std::nullopt;
  return Suggestion{TriageStep::chunked_loss, flags_of(&memory::MemoryConfig::loss, t.memory.loss), saved,
                    "the " + shape_str(s.micro_batch, s.seq, m.vocab_size) + " " +
                        std::string(dtype_name(s.precision.param_dtype())) + " logits (" +
                        format_bytes(logits_bytes(m, s, tokens)) +
                        ") and their gradient never exist whole, one chunk of " +
                        std::to_string(t.memory.loss.chunk_size) + " tokens does",
                    t};
}

std::optional<Suggestion> suggest_fused_attention(const models::ModelConfig& m, const TriageSettings& s) {
  if (s.attention == AttentionKernel::flash) return std::nullopt;
  TriageSettings t = s;
  t.attention = AttentionKernel::flash;
  const int64_t saved = saving(m, s, t);
  if (saved <= 0) return std::nullopt;
  return Suggestion{TriageStep::fused_ops, "--attention flash", saved,
                    "fused attention keeps no (s x s) tensor for backward", t};
}

Suggestion suggest_sharding(const models::ModelConfig& m, const TriageSettings& s) {
  TriageSettings zero3 = s;
  zero3.parallel.sharding = parallel::ShardingStrategy::optim_grads_params;
  if (s.parallel.sharding == parallel::ShardingStrategy::optim_grads_params && s.parallel.overlap_grad_reduce)
    return {TriageStep::sharding, "", 0, "on: parameters, gradients and optimizer states are sharded over the ranks",
            s};
  zero3.parallel.overlap_grad_reduce = true;
  if (s.parallel.sharding != parallel::ShardingStrategy::no_shard) {
    const int64_t more = saving(m, s, zero3);
    if (more <= 0) return {TriageStep::sharding, "", 0, "on: the optimizer states are sharded over the ranks", s};
    const bool params = s.parallel.sharding != parallel::ShardingStrategy::optim_grads_params;
    const std::string flags = std::string(s.parallel.overlap_grad_reduce ? "" : "--overlap-grad-reduce") +
                              (params ? std::string(s.parallel.overlap_grad_reduce ? "" : " ") +
                                            "--data-parallel-sharding-strategy optim_grads_params"
                                      : "");
    return {TriageStep::sharding, flags, more,
            std::string(params ? "the parameters too, gathered layer by layer when they compute (ZeRO-3; two "
                                 "all-gathers of every layer per micro-batch)"
                               : "") +
                (s.parallel.overlap_grad_reduce
                     ? ""
                     : std::string(params ? ", and " : "") +
                           "each bucket of gradients freed once reduce-scattered during backward"),
            zero3};
  }
  TriageSettings t = s;
  t.parallel.sharding = parallel::ShardingStrategy::optim;
  if (s.parallel.world > 1) {
    const int64_t more = saving(m, t, zero3);
    return {TriageStep::sharding, "--use-distributed-optimizer", saving(m, s, t),
            "AdamW's states split over the " + std::to_string(s.parallel.world) + " ranks (ZeRO-1)" +
                (more > 0 ? "; --data-parallel-sharding-strategy optim_grads_params would save " + format_bytes(more) +
                                " more (ZeRO-3: the parameters too, gathered layer by layer)"
                          : std::string()),
            t};
  }
  // One rank: what 8 would save, for a run under mpirun -np 8 (docs/distributed.md).
  t.parallel.world = 8;
  TriageSettings eight = s;
  eight.parallel.world = 8;
  const int64_t per_rank = saving(m, eight, t);
  return {TriageStep::sharding, "", 0,
          "needs several ranks: under mpirun -np 8 with --use-distributed-optimizer each rank would hold " +
              format_bytes(predict_step_peak(m, t).optimizer_states) + " of AdamW's states instead of " +
              format_bytes(predict_step_peak(m, eight).optimizer_states) +
              (per_rank > 0 ? " (a peak " + format_bytes(per_rank) + " lower per rank)"
                            : " (the step's peak would not be lower: at this size it is the reduce-scatter's)"),
          s};
}

std::vector<Suggestion> suggest_recompute(const models::ModelConfig& m, const TriageSettings& s) {
  using memory::Granularity;
  using memory::RecomputeModule;
  const memory::RecomputeConfig& cur = s.memory.recompute;
  const bool moe_only = [&] {
    for (int64_t l = 0; l < m.num_hidden_layers; ++l)
      if (!m.is_moe_layer(l)) return false;
    return true;
  }();
  std::vector<std::pair<memory::RecomputeConfig, std::string>> candidates;  // in order: selective ones, then full
  if (cur.granularity == Granularity::none) {
    if (s.attention == AttentionKernel::eager) {
      memory::RecomputeConfig c = cur;
      c.granularity = Granularity::selective;
      c.modules = {RecomputeModule::core_attn};
      c.activation_function = c.norm = false;
      c.activation_num_layers = c.norm_num_layers = -1;
      candidates.push_back({c, "recomputes the attention core"});
    }
    if (!cur.activation_function || !cur.norm || cur.activation_num_layers >= 0 || cur.norm_num_layers >= 0) {
      memory::RecomputeConfig c = cur;
      c.activation_function = c.norm = true;
      c.activation_num_layers = c.norm_num_layers = -1;
      candidates.push_back({c, "nearly free: recomputes the MLP activation and the norms"});
    }
  }
  if (cur.granularity != Granularity::full) {
    memory::RecomputeConfig c;
    c.granularity = Granularity::selective;
    // DeepSeek-V4's core keeps its parts' outputs and merge weights with the flash kernel too.
    if (s.attention == AttentionKernel::eager || m.is_deepseek_v4()) c.modules.push_back(RecomputeModule::core_attn);
    c.modules.push_back(moe_only ? RecomputeModule::moe : RecomputeModule::mlp);
    if (m.is_moe() && !moe_only) c.modules.push_back(RecomputeModule::moe);
    if (m.is_mla()) c.modules.push_back(RecomputeModule::mla_up_proj);
    candidates.push_back({c, m.is_deepseek_v4()
                                 ? std::string("checkpoints the attention core and the MoE blocks")
                                 : "checkpoints the MLP" + std::string(m.is_moe() ? " and MoE blocks" : "") +
                                       (m.is_mla() ? ", recomputes MLA's up-projections" : "")});
  }
  if (!(cur.granularity == Granularity::full && cur.method == memory::RecomputeMethod::uniform &&
        cur.num_layers == 1)) {
    memory::RecomputeConfig c;
    c.granularity = Granularity::full;
    c.method = memory::RecomputeMethod::uniform;
    c.num_layers = 1;
    candidates.push_back(
        {c, "about one more forward pass per step; --recompute-method block N recomputes only N layers"});
  }
  if (m.is_deepseek_v4()) {  // its own flags on top of what is on (docs/recompute.md)
    for (const bool csa : {true, false}) {
      if (csa ? cur.csa_attention : cur.mhc) continue;
      memory::RecomputeConfig c = cur;
      (csa ? c.csa_attention : c.mhc) = true;
      candidates.push_back({c, csa ? "the compressed layers' compressor, indexer and attention core recomputed in "
                                     "backward"
                                   : "the mHC mappings' norm, projection and Sinkhorn intermediates and the mid-layer "
                                     "streams recomputed in backward"});
    }
  }
  std::vector<Suggestion> out;
  for (const auto& [c, note] : candidates) {
    TriageSettings t = s;
    try {
      t.memory.set_recompute(c, m);
    } catch (const Error&) {  // the rules reject it for this model (memory/recompute.h)
      continue;
    }
    const int64_t saved = saving(m, s, t);
    if (saved <= 0) continue;
    // DeepSeek-V4's flags: what they keep less after forward (memory/deepseek_v4_savings.h), beside the peak's saving.
    const int64_t kept_less =
        m.is_deepseek_v4() ? memory::deepseek_v4_recompute_saving(m, t.memory.recompute_plan, s.micro_batch, s.seq,
                                                                  s.precision.param_dtype(), s.attention) -
                                 memory::deepseek_v4_recompute_saving(m, s.memory.recompute_plan, s.micro_batch, s.seq,
                                                                      s.precision.param_dtype(), s.attention)
                           : 0;
    out.push_back({c.granularity == Granularity::full ? TriageStep::recompute_full : TriageStep::recompute_selective,
                   flags_of(&memory::MemoryConfig::recompute, c), saved,
                   note + (kept_less > 0 ? "; " + format_bytes(kept_less) + " less kept after forward" : "") +
                       (cur.any() ? "; replaces the current --recompute-* flags" : ""),
                   t});
  }
  return out;
}

std::optional<Suggestion> suggest_offload(const models::ModelConfig& m, const TriageSettings& s) {
  if (s.memory.offload.enabled) return std::nullopt;
  const bool full = s.memory.recompute.granularity == memory::Granularity::full;
  TriageSettings t = s;
  t.memory.offload = {};
  t.memory.offload.enabled = true;
  t.memory.offload.policy = {full ? memory::OffloadPolicyKind::layer_input : memory::OffloadPolicyKind::all};
  const int64_t saved = saving(m, s, t);
  if (saved <= 0) return std::nullopt;
  return Suggestion{TriageStep::async_offload, flags_of(&memory::MemoryConfig::offload, t.memory.offload), saved,
                    std::string(full ? "the checkpointed layer inputs" : "the saved activations") +
                        " of every block but the last wait in host memory, one block comes back ahead of backward; "
                        "copies overlap compute",
                    t};
}

std::optional<Suggestion> suggest_swap_optimizer(const models::ModelConfig& m, const TriageSettings& s) {
  if (s.memory.swap_optimizer.on) return std::nullopt;
  TriageSettings t = s;
  const std::vector<memory::SwapParam> params = swap_params(m, s);
  t.memory.swap_optimizer = {true, std::min<int64_t>(memory::kSwapOptimizerDefaultTimes, int64_t(params.size()))};
  const int64_t saved = saving(m, s, t);
  if (saved <= 0) return std::nullopt;
  return Suggestion{
      TriageStep::swap_optimizer, flags_of(&memory::MemoryConfig::swap_optimizer, t.memory.swap_optimizer), saved,
      std::string(s.precision.bf16 ? "AdamW's f32 master weights and moments (" : "AdamW's moments (") +
          format_bytes(memory::swap_state_bytes_per_element(s.precision.param_dtype()) * element_count(params)) +
          ") live in host memory: none on the device in forward and backward, two of its " +
          std::to_string(t.memory.swap_optimizer.times) + " windows in the optimizer step",
      t};
}

std::optional<Suggestion> suggest_smaller_micro_batch(const models::ModelConfig& m, const TriageSettings& s) {
  if (s.micro_batch < 2) return std::nullopt;
  TriageSettings t = s;
  t.micro_batch = s.micro_batch / 2;
  return Suggestion{
      TriageStep::batch,
      "--micro-batch-size " + std::to_string(t.micro_batch) + " --global-batch-size " + std::to_string(s.global_batch),
      saving(m, s, t), "the same global batch by gradient accumulation", t};
}

std::optional<Suggestion> suggest_parallel_size(const models::ModelConfig& m, const TriageSettings& s, TriageStep step,
                                                int n) {
  TIDAL_ASSERT(step == TriageStep::expert_parallel || step == TriageStep::context_parallel,
               "suggest_parallel_size: not a parallel step");
  const int ranks = s.parallel.world;
  if (n < 2 || n > ranks) return std::nullopt;
  TriageSettings w = s;
  (step == TriageStep::expert_parallel ? w.parallel.expert : w.parallel.context) = n;
  // What tidal train checks of a layout.
  if (m.is_deepseek_v4() && step == TriageStep::context_parallel) return std::nullopt;  // models/deepseek_v4.h
  try {
    parallel::check_expert_parallel(w.parallel, m);
    parallel::check_context_parallel(w.parallel, s.seq);
  } catch (const Error&) {
    return std::nullopt;
  }
  if (ranks % w.parallel.context != 0) return std::nullopt;  // E x C need not divide the ranks (docs/distributed.md)
  const int64_t saved = saving(m, s, w);
  if (saved <= 0) return std::nullopt;
  if (step == TriageStep::expert_parallel)
    return Suggestion{step, "--expert-model-parallel-size " + std::to_string(n), saved,
                      std::to_string(m.num_experts / n) + " of the " + std::to_string(m.num_experts) +
                          " experts of each MoE layer a rank, with their gradients and states; tokens go to their "
                          "experts' ranks and back (all-to-all)",
                      w};
  return Suggestion{step, "--context-parallel-size " + std::to_string(n), saved,
                    std::to_string(s.seq / n) + " of each sequence's " + std::to_string(s.seq) +
                        " tokens a rank: activations and logits / " + std::to_string(n) +
                        (s.attention == AttentionKernel::eager ? "; K/V all-gathered over the ranks"
                                                               : "; K/V blocks go around the ring"),
                    w};
}

std::vector<Suggestion> suggest_parallel(const models::ModelConfig& m, const TriageSettings& s) {
  std::vector<Suggestion> out;
  if (s.parallel.world <= 1) return out;
  // The largest size that runs: the most it saves (the search weighs the collectives).
  const auto largest = [&](TriageStep step) {
    for (int n = s.parallel.world; n > 1; --n)
      if (std::optional<Suggestion> x = suggest_parallel_size(m, s, step, n)) {
        out.push_back(std::move(*x));
        return;
      }
  };
  if (m.is_moe() && s.parallel.expert == 1) largest(TriageStep::expert_parallel);
  if (s.parallel.context == 1) largest(TriageStep::context_parallel);
  return out;
}

const char* name(TriageStep step) {
  switch (step) {
    case TriageStep::chunked_loss: return "chunked loss";
    case TriageStep::fused_ops: return "fused ops";
    case TriageStep::sharding: return "sharding";
    case TriageStep::expert_parallel: return "expert parallel";
    case TriageStep::context_parallel: return "context parallel";
    case TriageStep::recompute_selective: return "recompute (selective)";
    case TriageStep::recompute_full: return "recompute (full)";
    case TriageStep::async_offload: return "async offload";
    case TriageStep::swap_optimizer: return "swap optimizer";
    case TriageStep::batch: return "batch";
  }
  return "?";
}

int triage_group(TriageStep step) {
  switch (step) {
    case TriageStep::chunked_loss:
    case TriageStep::fused_ops: return 1;
    case TriageStep::sharding:
    case TriageStep::expert_parallel:
    case TriageStep::context_parallel: return 2;
    case TriageStep::recompute_selective:
    case TriageStep::recompute_full: return 3;
    case TriageStep::async_offload: return 4;
    case TriageStep::swap_optimizer: return 5;
    case TriageStep::batch: return 6;
  }
  return 6;
}

std::vector<Suggestion> triage(const models::ModelConfig& m, const TriageSettings& s) {
  std::vector<Suggestion> out;
  auto add = [&](std::optional<Suggestion> x) {
    if (x) out.push_back(std::move(*x));
  };
  add(suggest_chunked_loss(m, s));
  add(suggest_fused_attention(m, s));
  out.push_back(suggest_sharding(m, s));
  for (Suggestion& x : suggest_parallel(m, s)) out.push_back(std::move(x));
  for (Suggestion& x : suggest_recompute(m, s)) out.push_back(std::move(x));
  add(suggest_offload(m, s));
  add(suggest_swap_optimizer(m, s));
  add(suggest_smaller_micro_batch(m, s));
  return out;
}

std::string oom_advice(const models::ModelConfig& m, const TriageSettings& s, int64_t limit) {
  const StepPeak peak = predict_step_peak(m, s);
  std::string out = "A training step of " + m.model_type + " with micro-batch " + std::to_string(s.micro_batch) +
                    " x " + std::to_string(s.seq) + " tokens needs about " + format_bytes(peak.total) +
                    " (parameters " + format_bytes(peak.parameters) + ", AdamW states " +
                    format_bytes(peak.optimizer_states) + ", activations " + format_bytes(peak.activations) +
                    ", logits and their gradient " + format_bytes(peak.logits) + ")" +
                    (limit > 0 ? "; the limit is " + format_bytes(limit) : "") + ".\n";
  out += "What to try, in the triage order (savings predicted by tidal's estimator):\n";
  int last_group = 0;
  for (const Suggestion& x : triage(m, s)) {
    if (x.step == TriageStep::batch) {
      out += "  also: " + x.flags + " would save " + format_bytes(x.saving) + " (" + x.note +
             "); or a larger device (TIDAL_DEVICE_MEMORY)\n";
      continue;
    }
    const int g = triage_group(x.step);
    char head[64];
    std::snprintf(head, sizeof head, "  %-3s%-24s", g != last_group ? (std::to_string(g) + ".").c_str() : "",
                  (std::string(name(x.step)) + ":").c_str());
    last_group = g;
    out += head;
    const bool enough = limit > 0 && peak.total - x.saving <= limit;
    out += x.flags.empty() ? x.note + "\n"
                           : x.flags + " would save " + format_bytes(x.saving) + (enough ? ", enough alone" : "") +
                                 " (" + x.note + ")\n";
  }
  std::vector<std::string> on;
  if (s.memory.loss.chunked) on.push_back("chunked loss");
  if (s.attention == AttentionKernel::flash) on.push_back("fused (flash) attention");
  if (s.memory.recompute.any()) on.push_back("recompute " + s.memory.recompute.describe());
  if (s.memory.offload.enabled) on.push_back("activation offload");
  if (s.memory.swap_optimizer.on) on.push_back("swap optimizer");
  if (s.precision.bf16) on.push_back("bf16 mixed precision");
  if (!on.empty()) {
    out += "  already on:";
    for (size_t i = 0; i < on.size(); ++i) out += (i ? ", " : " ") + on[i];
    out += "\n";
  }
  return out;
}

std::string out_of_memory_message(const OutOfMemory& e, const models::ModelConfig& m, const TriageSettings& s,
                                  const std::string& planner) {
  std::string msg = e.what();
  const size_t hint = msg.find("What to try:");
  if (hint != std::string::npos) msg.resize(hint);
  std::string advice;
  try {
    advice = oom_advice(m, s, e.stats().limit);
  } catch (const std::exception& x) {  // the advice must never hide the error itself
    advice = std::string("(no advice: ") + x.what() + ")\n";
  }
  const int64_t limit = e.stats().limit;
  std::string limit_arg = format_bytes(limit);  // one shell word: "3.50MiB"
  limit_arg.erase(std::remove(limit_arg.begin(), limit_arg.end(), ' '), limit_arg.end());
  return msg + advice +
         (!planner.empty() ? planner
          : limit > 0
              ? "'tidal plan' with the same flags and --memory " + limit_arg + " picks the steps that make it fit.\n"
              : std::string()) +
         "Checkpoints already written are intact; 'tidal train --profile DIR --profile-steps 1' shows the timeline up "
         "to the failure.";
}

}  // namespace tidal::plan
