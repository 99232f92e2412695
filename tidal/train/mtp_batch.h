#pragma once
// Multi-token prediction's inputs for a micro-batch (models/mtp.h; docs/training.md, "Multi-token prediction"):
// for each depth k = 1..D the input ids and the targets rolled left by k along the sequence, as Megatron-LM's
// roll_tensor rolls them (0 rolled into the ids, -100 into the targets: the last k positions train nothing), this
// rank's rows under context parallelism. The rolls read the whole sequence, which every rank of a context-parallel
// group holds, so no rank exchanges anything.
#include <cstdint>

#include "tidal/device.h"
#include "tidal/memory/chunk_loss.h"
#include "tidal/tensor.h"

namespace tidal::train {

// tokens (B, T + 1) i64 on the host: inputs tokens[:, :T]; the targets are labels[:, 1:] when `labels` (B, T + 1)
// is defined (instruction data, -100 not trained), else tokens[:, 1:]. Each depth's weight is this rank's share
// of its trained targets (MtpInputs::weights).
memory::MtpInputs mtp_inputs(const Tensor& tokens, const Tensor& labels, int64_t depths, int cp_size, int cp_rank,
                             Device device);

}  // namespace tidal::train
