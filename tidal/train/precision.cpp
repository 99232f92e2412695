#include "tidal/train/precision.h"

namespace tidal::train {

Flags& add_precision_flags(Flags& f) {
  return f.flag("bf16",
                "mixed precision: bf16 parameters and activations, f32 gradients summed over the micro-batches, "
                "f32 master weights and AdamW states (docs/training.md)");
}

PrecisionConfig parse_precision(const Flags& f) {
  PrecisionConfig p;
  p.bf16 = f.flag_on("bf16");
  return p;
}

}  // namespace tidal::train
