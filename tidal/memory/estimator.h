#pragma once
// Analytic activation memory (docs/memory.md): the bytes each layer keeps for backward under each
// recompute policy, for GPT-2, Llama/Qwen3 and Qwen3-MoE, and the peak over a training step — in
// the spirit of Korthikanti et al. (2022), but counting exactly what tidal's kernels save (f32 or,
// with --bf16, bf16 activations beside the statistics kept in f32; fused norms, flash or eager attention). The peak
// comes from replaying the step's saves and frees in order: the forward pass, then backward layer by layer with
// recomputes.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tidal/dtype.h"
#include "tidal/memory/memory_config.h"
#include "tidal/memory/recompute.h"
#include "tidal/models/config.h"
#include "tidal/ops/attention.h"
#include "tidal/parallel/layout.h"

namespace tidal::memory {

struct ActivationInputs {
  int64_t batch = 1;
  int64_t seq = 1;
  AttentionKernel kernel = AttentionKernel::flash;
  bool training = true;              // dropout active (where the config has it)
  std::vector<LayerRecompute> plan;  // empty: no recompute
  // The model's parameter dtype, so its activations' (f32, or bf16 under --bf16). Norm statistics,
  // attention's log-sum-exp, router probabilities, the top-k weights they normalize and the loss's
  // log-sum-exp stay f32 (the kernels' accumulator dtype).
  DType dtype = DType::f32;
  // Activation offload (memory/offload.h): none, or the policy; blocks are layers, or full-recompute
  // groups; the last block is never offloaded.
  std::optional<OffloadPolicy> offload_policy;
  int64_t offload_prefetch_depth = 1;
  // Sparse MoE layers: how many (token, expert) slots each expert got, per layer ([layer][expert]);
  // a layer without counts assumes an even split (what a meta-device run of the model does).
  std::vector<std::vector<int64_t>> expert_tokens;
  // The run's parallel layout (parallel/layout.h). Expert parallel E: this rank runs num_experts / E experts (rank 0's
  // block), each on the slots every one of the E ranks sends it (the even split: E x its share of this rank's slots),
  // and keeps the all-to-all's row orders and the returned rows (models/moe.cpp run_on_owners) instead of the experts'
  // outputs. Context parallel C: `seq` is this rank's two chunks of the sequence (C·seq tokens in all). Flash attention
  // saves as without it (the ring's blocks are transient); eager keeps the gathered K and V of the whole sequence
  // (ops/context_gather_attention.h) instead of the local ones (which a core_attn recompute keeps as its inputs), and
  // the probabilities of each chunk of queries against the keys before it: rank 0's chunks, L x L and L x 2C·L (L = seq
  // / 2), (2C+1)·L² in all on every rank.
  // Of it, only the expert and context parallel sizes are read (tidal plan's memo of estimates relies on it).
  parallel::ParallelLayout parallel;
  int64_t loss_chunk = 0;  // --loss-compute-mode chunk's tokens per chunk; 0: default mode
  // LoRA (nn/lora.h): the base is frozen, so a base linear layer keeps no input; an adapted one keeps it for its
  // adapter, and the adapter keeps its (N, r) down-projection; nothing before the first adapter needs a gradient
  // (layer 0's input norm keeps nothing), and the LM head keeps no input. Dense layers (attention and MLP); a sparse
  // MoE layer's experts are counted as without LoRA (an upper bound). `lora_modules`: the adapted modules' names.
  bool lora = false;
  std::vector<std::string> lora_modules;
  int64_t lora_r = 0;
  bool operator==(const ActivationInputs&) const = default;
};

struct ActivationEstimate {
  int64_t peak = 0;                 // highest activation bytes over forward + backward
  int64_t after_forward = 0;        // held when the forward pass (and the loss) is done
  std::vector<int64_t> layer_kept;  // held per layer after forward
  std::vector<int64_t> layer_full;  // what each layer would hold without recompute
  int64_t outside_layers = 0;       // embeddings, final norm, LM head input, loss (not logits);
                                    // chunk mode: the loss's stored gradients instead of the last two
  int64_t offloaded_per_step = 0;   // device bytes offload sends away in one micro-batch
  // Backward part by part: the highest bytes before the layers' backward (the losses, the heads, the MTP depths),
  // then per block from the last (its first layer; a block is a layer or a full-recompute group; its prefetches
  // included). With the gradients each part has made so far, the planner's backward peak (plan/step_peak.h).
  int64_t backward_before_layers = 0;
  struct BackwardBlock {
    int64_t first_layer = 0;
    int64_t peak = 0;
  };
  std::vector<BackwardBlock> backward_blocks;
  // The gradient of the hidden states between layers (N x hidden, the activations' dtype), alive through each
  // layer's backward beside what the layer holds. The other gradients of activations, transient inside a layer,
  // are not counted (docs/memory.md).
  int64_t hidden_gradient = 0;
  std::string peak_at;  // where the peak happens, in words
};

ActivationEstimate estimate_activations(const models::ModelConfig& config, const ActivationInputs& in);

// Refuses (tidal::Error naming the micro-batch and the model, and what to change) a training step of
// micro-batch (batch, seq) whose byte counts could overflow 64-bit arithmetic: a generous upper bound
// of everything the step saves (eager attention's probabilities, batch x heads x seq^2, included), its logits and its
// parameters with their gradients and AdamW states, times 4 for the sums the estimator and the planner form, must fit
// in int64 (8 EiB). Real models are far below it (a 1T-parameter model's states are ~2^44 bytes); flags like
// --micro-batch-size 16777216
// --seq-length 1099511627775 are not. estimate_activations checks it first; `tidal train` and
// `tidal plan` check it while parsing their flags.
void check_step_sizes(const models::ModelConfig& config, int64_t batch, int64_t seq, AttentionKernel kernel);

// The inputs of a training step of micro-batch (batch, seq) under a memory configuration: its
// recompute plan, offload policy and prefetch depth, and loss chunk; `dtype` the parameters'.
ActivationInputs activation_inputs(const MemoryConfig& c, int64_t batch, int64_t seq, AttentionKernel kernel,
                                   DType dtype = DType::f32);

}  // namespace tidal::memory
