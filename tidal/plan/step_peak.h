#pragma once
// The peak of a training step as tidal's estimator predicts it, from the model config, the batch
// shape and the run's settings alone (no model is built but a meta-device one, once per
// configuration): what the out-of-memory advice (oom_advice.h), `tidal plan`'s triage (triage.h) and
// its search (search.h) rank configurations by. Within a few percent of the measured peak (tested).
#include <cstdint>
#include <vector>

#include "tidal/memory/memory_config.h"
#include "tidal/memory/swap_optimizer.h"
#include "tidal/models/config.h"
#include "tidal/ops/attention.h"
#include "tidal/parallel/data.h"
#include "tidal/train/arguments.h"

namespace tidal::plan {

// What is on now: the batch shape, the attention kernel and the memory configuration.
struct TriageSettings {
  int64_t micro_batch = 1, seq = 1, global_batch = 1;
  AttentionKernel attention = AttentionKernel::flash;
  memory::MemoryConfig memory;  // recompute (set with set_recompute: it carries the plan), offload, loss, swap
  int64_t num_parameters = 0;   // 0: counted from the config (a meta-device model)
  // The ranks (mpirun -np N; tidal plan --data-parallel-size N) and how they split the run: what they
  // shard (ZeRO-3 gathers a layer's parameters at a time, the next one's early with the overlap),
  // whether gradients are reduced (and, sharded, freed) bucket by bucket. Expert parallel E: a rank
  // holds num_experts / E experts of each MoE layer (their states sharded over the N / E ranks of its
  // expert-data group, the dense ones over all N), runs them on the rows the all-to-all brings (an
  // even split: tokens x top-k rows) and keeps that exchange's rows. Context parallel C: a rank holds
  // 2 of 2C chunks of every sequence (seq / C tokens: activations and logits), and the ring's K/V
  // blocks in flight.
  parallel::ParallelLayout parallel;
  // --bf16: bf16 parameters and activations, f32 gradient sums, AdamW's f32 master weights and moments.
  train::PrecisionConfig precision;
  // LoRA (train/lora_args.h resolved): gradients, reductions and AdamW's states for the adapters alone, the
  // frozen base held in the parameters' dtype. The activations are counted as without it (an upper bound:
  // a frozen layer without an adapter keeps no input for its weight's gradient).
  nn::LoraConfig lora;
};
// The settings of `args` (its layout's world: the ranks the run has, or is planned for).
TriageSettings triage_settings(const train::TrainArgs& args);

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

// The default loss's logits of `tokens` tokens: the model's dtype (bf16 under --bf16).
int64_t logits_bytes(const models::ModelConfig& m, const TriageSettings& s, int64_t tokens);
// The model's parameters (this rank's under expert parallelism) as the swap optimizer plans its
// windows, in the run's dtype; `num_parameters` f32 elements in one piece when only the count is known.
std::vector<memory::SwapParam> swap_params(const models::ModelConfig& m, const TriageSettings& s);
int64_t element_count(const std::vector<memory::SwapParam>& params);

}  // namespace tidal::plan
