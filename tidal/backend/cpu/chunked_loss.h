#pragma once
// CPU kernel of the chunked LM loss (tidal/ops/chunked_loss.h). Per chunk of rows: the LM-head
// product into one (chunk, V) buffer, each row's cross-entropy, the logits' gradient written over
// the logits in place, then the two products that turn it into the gradients of the chunk's hidden
// rows and (accumulated) of the weight. f32 and f64; the op converts bf16 around it.
#include <cstdint>

#include "tidal/backend/kernel_args.h"
#include "tidal/tensor.h"

namespace tidal::cpu {

// Rows whose target is not ignore_index. targets: contiguous (rows) i32 or i64.
int64_t count_not_ignored(const Tensor& targets, int64_t ignore_index);

// hidden (rows, C), weight (V, C), targets (rows, valid), all contiguous and of one float dtype
// (targets i32/i64); logits (>= min(chunk, rows), V) the working buffer; row_loss (rows). grad_hidden
// (rows, C) and grad_weight (V, C) are written when defined. Returns the sum of the non-ignored row
// losses added in row order: cross_entropy's order, so the mean has the same bits.
double chunked_lm_loss_forward(const Tensor& hidden, const Tensor& weight, const Tensor& targets, const Tensor& logits,
                               const Tensor& row_loss, const Tensor& grad_hidden, const Tensor& grad_weight,
                               const ChunkedLossArgs& a);

}  // namespace tidal::cpu
