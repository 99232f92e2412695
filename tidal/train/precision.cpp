#include "tidal/train/precision.h"

#include "tidal/base/error.h"

namespace tidal::train {

Flags& add_precision_flags(Flags& f) {
  return f.flag("bf16",
                "mixed precision: bf16 parameters and activations, f32 gradients summed over the micro-batches, "
                "f32 master weights and AdamW states (docs/training.md)");
}

PrecisionConfig parse_precision(const Flags& f, const DataParallelConfig& data_parallel) {
  PrecisionConfig p;
  p.bf16 = f.flag_on("bf16");
  if (!p.bf16) return p;
  // The f32 gradient sums become the parameters' gradients after a backward (train/main_grads.h):
  // --overlap-grad-reduce's hooks would read bf16 ones before.
  TIDAL_CHECK(!data_parallel.overlap_grad_reduce,
              "tidal train: --bf16 with --overlap-grad-reduce is not supported yet: drop one of them");
  return p;
}

}  // namespace tidal::train
