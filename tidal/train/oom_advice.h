#pragma once
// Out-of-memory advice for `tidal train`: when the device limit is exceeded, the message shows the
// breakdown at that moment and then the next steps in the triage order — chunked loss / fused ops,
// sharding, recompute (selective, then full), async offload, swap optimizer — each with the saving
// tidal's estimator predicts for this model and batch, skipping what is already on. Every
// suggestion is a small function of the model config, the batch shape and the current settings, so
// a feature that lands later only adds its field to memory::MemoryConfig. The flags of a suggestion
// are train/memory_flags.h's spelling of the configuration it changes.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tidal/allocator.h"
#include "tidal/memory/memory_config.h"
#include "tidal/models/config.h"
#include "tidal/ops/attention.h"
#include "tidal/train/arguments.h"

namespace tidal::train {

// What is on now: the batch shape, the attention kernel and the memory configuration.
struct TriageSettings {
  int64_t micro_batch = 1, seq = 1, global_batch = 1;
  AttentionKernel attention = AttentionKernel::flash;
  memory::MemoryConfig memory;  // recompute (set with set_recompute: it carries the plan), offload, loss, swap
  int64_t num_parameters = 0;   // 0: counted from the config (a meta-device model)
  int data_parallel = 1;        // ranks (mpirun -np N; tidal plan --data-parallel-size N)
  ShardingStrategy sharding = ShardingStrategy::no_shard;
  bool overlap_param_gather = false;  // ZeRO-3 gathers the next layer's parameters early
  bool overlap_grad_reduce = false;   // gradients reduced (and, sharded, freed) bucket by bucket
  int64_t bucket_elements = 0;        // --ddp-bucket-size as resolved for the ranks (0: one bucket)
  // --expert-model-parallel-size E: a rank holds num_experts / E experts of each MoE layer (their
  // states sharded over the N / E ranks of its expert-data group, the dense ones over all N), runs
  // them on the rows the all-to-all brings (an even split: tokens x top-k rows) and keeps that
  // exchange's rows. --context-parallel-size C: a rank holds 2 of 2C chunks of every sequence
  // (seq / C tokens: activations and logits), and the ring's K/V blocks in flight.
  int expert_parallel = 1;
  int context_parallel = 1;
  // --bf16: bf16 parameters and activations, f32 gradient sums, AdamW's f32 master weights and moments.
  PrecisionConfig precision;
};
// `data_parallel`: the ranks the run has (or is planned for).
TriageSettings triage_settings(const TrainArgs& args, int data_parallel = 1);

struct Suggestion {
  std::string step;  // "chunked loss", "fused ops", "sharding", "recompute", "async offload", "swap optimizer", "batch"
                     // (sharding saves only with several ranks; on one, its note says what N ranks would)
  std::string flags;    // to add to the command line ("" when there is nothing to add)
  int64_t saving = 0;   // predicted bytes saved at the step's peak
  std::string note;     // where the number comes from, or why it is not available
  TriageSettings with;  // the settings with this step taken (unchanged for sharding)
};

// The suggestions, one small function each (nullopt: already on, or it would save nothing).
std::optional<Suggestion> suggest_chunked_loss(const models::ModelConfig& m, const TriageSettings& s);
std::optional<Suggestion> suggest_fused_attention(const models::ModelConfig& m, const TriageSettings& s);
Suggestion suggest_sharding(const models::ModelConfig& m, const TriageSettings& s);
// Expert parallelism (MoE models) and context parallelism with several ranks, each at the largest size
// tidal train runs on them (check_expert_parallel, check_context_parallel): the ranks' layout, in the
// sharding group of the triage order (after sharding, before recompute).
std::vector<Suggestion> suggest_parallel(const models::ModelConfig& m, const TriageSettings& s);
std::vector<Suggestion> suggest_recompute(const models::ModelConfig& m, const TriageSettings& s);
std::optional<Suggestion> suggest_offload(const models::ModelConfig& m, const TriageSettings& s);
std::optional<Suggestion> suggest_swap_optimizer(const models::ModelConfig& m, const TriageSettings& s);
std::optional<Suggestion> suggest_smaller_micro_batch(const models::ModelConfig& m, const TriageSettings& s);

// The peak of a training step as the estimator sees it (within a few percent of the measured one,
// tested): the largest of the LM head and loss (parameters, AdamW's states unless swapped, what
// forward kept, the head and loss's own peak from memory/savings.h: the logits and their gradient,
// or one chunk of them), a recompute replay or offload prefetch in backward (the activation peak,
// with gradients), and the optimizer step (parameters, gradients, the states on the device: all, or
// the swap optimizer's two windows). With the distributed optimizer (docs/distributed.md) AdamW's
// states are the largest shard's, and the reduce-scatter adds the shard's sum and every rank's pieces
// of it to the whole gradients. Activations come from the estimator with the recompute plan,
// the offload policy, the loss mode and the dtype, so offload's and chunked loss's effects are its
// exact ones. --bf16 (Megatron's 18 bytes per parameter): 2-byte parameters, the f32 gradient sums
// (4 bytes, as an f32 run's gradients) beside one backward's bf16 gradient of the largest parameter
// (2 bytes an element: a tied embedding's lives through the whole backward), 12 bytes of AdamW state
// (f32 master weight and moments) per element, bf16 activations and logits.
struct StepPeak {
  int64_t total = 0, parameters = 0;
  int64_t optimizer_states = 0;  // on the device during the optimizer step
  int64_t activations = 0;       // the activation peak (estimator)
  int64_t logits = 0;            // the logits and their gradient, or one chunk of logits
};
StepPeak predict_step_peak(const models::ModelConfig& m, const TriageSettings& s);
// The exchange buffers of expert or context parallelism a layer holds beside the activations (0
// without either): the all-to-all's received and returned rows, 2 x tokens x top-k x hidden, or the
// ring's current and next K/V blocks with their f32 dK/dV in backward (with eager attention the
// all-gather's whole-sequence dK and dV, with one of them by rank twice: 4 x C x tokens x K's width).
int64_t exchange_buffer_bytes(const models::ModelConfig& m, const TriageSettings& s);
// Each suggestion's saving is the drop of this prediction when its setting is turned on.

// The step's place in the triage order: 1 chunked loss / fused ops, 2 sharding (and expert and context
// parallelism), 3 recompute,
// 4 async offload, 5 swap optimizer, 6 a smaller micro-batch (not in the order: the last resort).
int triage_group(const std::string& step);

// All of them in the triage order.
std::vector<Suggestion> triage(const models::ModelConfig& m, const TriageSettings& s);
// The advice as text: "What to try, in the triage order ..."; with a device limit (bytes, 0: none)
// it marks what would be enough alone.
std::string oom_advice(const models::ModelConfig& m, const TriageSettings& s, int64_t limit = 0);
// The allocator's message (what failed, the breakdown at that moment) with its generic hint
// replaced by the advice; `planner` (the search's choice for the limit, train/auto_memory.h), when not
// empty, replaces the line that points to `tidal plan`.
std::string out_of_memory_message(const OutOfMemory& e, const models::ModelConfig& m, const TriageSettings& s,
                                  const std::string& planner = "");

}  // namespace tidal::train
