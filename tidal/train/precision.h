#pragma once
// --bf16, Megatron-LM's mixed precision (docs/training.md, "Mixed precision (--bf16)"): the
// parameters forward and backward use are bf16, so are the activations and the saved tensors; each
// backward's bf16 gradient is added into an f32 gradient kept across the micro-batches
// (train/main_grads.h, Megatron's main_grad); clipping, the NaN guard and AdamW read the f32 sums,
// and AdamW updates f32 master weights with f32 states and writes the bf16 copy from them
// (optim/adamw.h). Data parallelism reduces the f32 sums, with every sharding strategy and
// --overlap-grad-reduce. Parsed once into this typed value.
#include "tidal/base/flags.h"
#include "tidal/dtype.h"

namespace tidal::train {

struct PrecisionConfig {
  bool bf16 = false;  // --bf16
  // The dtype the model's parameters (and so its activations) have.
  DType param_dtype() const { return bf16 ? DType::bf16 : DType::f32; }
  // What config.json's torch_dtype says the exported weights are.
  const char* torch_dtype() const { return bf16 ? "bfloat16" : "float32"; }
};

Flags& add_precision_flags(Flags& f);
PrecisionConfig parse_precision(const Flags& f);

}  // namespace tidal::train
