#pragma once
// A dry run: the training steps of a configuration on the meta device (tensors with shapes and no
// values). The model, AdamW and the memory features are built as `tidal train` builds them
// (setup.h) and the same step code runs (step.h: every micro-batch's forward with the configured
// loss mode, recompute and activation offload, backward, the gradient reduction over the ranks,
// clipping, the optimizer update, swapped or sharded), so the meta allocators count exactly the bytes
// the real run's allocators count — the device's and the host's (offload copies, the disk tier's
// staging buffers, the swap optimizer's states) — for any model size, without touching memory or
// writing a file. Where the step reads values it takes a stand-in: the loss and the gradient norm
// are 0, an MoE router sends the tokens to the experts evenly (models/moe.cpp), and every rank has
// the gradients this one has (dist/meta_communicator.h).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tidal/autograd/saved_tensor_log.h"
#include "tidal/memory_stats.h"
#include "tidal/plan/kernel_records.h"
#include "tidal/train/arguments.h"

namespace tidal::plan {

// Two steps: AdamW makes its states at the first update, so the second step is the first in
// steady state (its forward and backward beside the states); the peak is the higher of the two.
inline constexpr int64_t kDryRunSteps = 2;

// dry_run_largest_rank dry-runs every rank of a sharded run up to this many ranks, and beyond it the
// ranks with the largest shards (their states and shard gradients are the largest).
inline constexpr int kDryRunRanks = 4;

struct DryRun {
  // The meta allocator's statistics from the build on, as the real run's device allocator reports
  // them (peak_allocated, per-category peaks, the breakdown at the peak, reserved bytes).
  MemoryStats device;
  // The meta host allocator's, as the real run's host allocator (allocator.h host_allocator) reports
  // them: category host_offload (offloaded activations, staging buffers, swapped AdamW states).
  MemoryStats host;
  // Bytes the first micro-batch's forward keeps for backward (category activation, policy kept: not
  // what a recompute discards or an offload sends away), per layer, and outside the layers (the
  // embedding's ids, the final norm, the LM head's input, the loss's statistics).
  std::vector<int64_t> activation_bytes_per_layer;
  int64_t activation_bytes_outside_layers = 0;
  // What the first micro-batch's forward saved for backward, tensor by tensor (what `tidal train
  // --report-memory` prints): layer, module, op, shape, dtype, bytes, policy.
  std::vector<autograd::SavedTensorRecord> saved;
  int64_t steps = 0;           // steps run: kDryRunSteps, or --train-iters when fewer
  int rank = 0, ranks = 1;     // the data-parallel rank this dry run played, of `ranks`
  std::vector<int> ranks_run;  // dry_run_largest_rank: the ranks it dry-ran
  // The sharding strategy it ran under: its optimizer step's kernels update the rank's shard (the
  // cost model times a sharded run's update from a no_shard one's by the shard's share).
  parallel::ShardingStrategy sharding = parallel::ShardingStrategy::no_shard;
  // The rank's trained parameters (under expert parallelism the dense ones and its experts; with LoRA the
  // adapters), in named_parameters order: their element counts, and which are experts' (models/moe.h).
  std::vector<int64_t> parameter_numels;
  std::vector<bool> expert_parameter;
  // The kernels of the last step run (the second: the steady state), as the meta device's cost
  // kernels report them, tagged with phase, layer and module (kernel_records.h): the cost model's input.
  std::vector<StepKernel> kernels;
  int64_t recorded_kernels = 0;  // kernels.size() as recorded (before the search merges identical ones)
};

// Dry-runs `args` in this process as rank `rank` of its layout's ranks (args.parallel.world). The data are mock
// tokens of the configured micro-batch shape and vocabulary (--data-path, the built-in corpus and a
// tokenizer are not read). Refuses, with tidal::Error, what it cannot account: --load and
// --pretrained (values), and --overlap-grad-reduce (its reductions run on a stream thread beside
// backward, so its peak depends on timing, in a real run too). The kernels' workspaces are sized as
// args.device's backend sizes them (seam/planned_device.h): `--device cuda` plans cuDNN's attention
// workspace; a build without that backend refuses to plan for it.
// `kept_kernels`: the kernels as tidal plan's search keeps them (kernel_records.h kept_for_timing: merged, without
// names), recorded without the whole list.
DryRun dry_run(const train::TrainArgs& args, int rank = 0, bool kept_kernels = false);

// The rank of args.parallel.world with the highest device peak (then host peak, then the lowest rank): without
// sharding every rank alike (rank 0 is run); sharded, every rank up to kDryRunRanks ranks, beyond
// that the kDryRunRanks ranks with the largest shards.
DryRun dry_run_largest_rank(const train::TrainArgs& args);

// One dry run's result: the run, or why it refused (the tidal::Error's message).
struct DryRunOutcome {
  std::optional<DryRun> run;
  std::string error;
};
// dry_run_largest_rank's parts, for a caller with processes of its own (plan/search.cpp): the ranks it runs
// (refuses as dry_run does what cannot be accounted); one rank's dry run with tidal::Error as the outcome's error
// (the saved-tensor table kept or not); and of the ranks' outcomes, in their order, the one it returns (throws the
// first refusal).
std::vector<int> largest_rank_candidates(const train::TrainArgs& args);
DryRunOutcome rank_dry_run(const train::TrainArgs& args, int rank, bool keep_saved);
DryRun largest_of(const std::vector<int>& ranks, std::vector<DryRunOutcome> outcomes);

}  // namespace tidal::plan
