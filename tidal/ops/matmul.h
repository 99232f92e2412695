#pragma once
// Matrix products through the device's matmul kernel (seam/kernels.h). f32 and f64 run natively; bf16 is
// converted to f32 around the product.
#include "tidal/tensor.h"

namespace tidal {

// a (..., m, k) @ b (..., k, n) -> (..., m, n), batch dims broadcast. 1-D operands are treated as a
// row (a) or column (b) vector and that dim is dropped from the result.
Tensor matmul(const Tensor& a, const Tensor& b);
// x (..., in) @ w^T + bias: w is (out, in), bias (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor());
// The LM head: linear(x, w) whose backward node is named kLmHeadBackward, so that profiles and the planner's
// kernel records (plan/kernel_records.h) tell the head's backward products from the layers'.
Tensor lm_head(const Tensor& x, const Tensor& w);
inline constexpr const char* kLmHeadBackward = "LmHeadBackward";

// For ops that hand products to the device's kernels themselves (ops/grouped_linear.cpp): `t` (..., rows, cols) as a
// view the device's matmul reads without a copy, else a contiguous copy (on meta tensors too, so a dry run counts
// the copy); and, on meta tensors, the planned device's kept workspace held from the first product on (below).
Tensor matmul_operand(const Tensor& t);
void hold_planned_matmul_workspace(const Tensor& out);

// A dry run (meta tensors) holds what the planned device's products keep from their first one on
// (Kernels::matmul_kept_workspace: cuBLASLt's 32 MiB on CUDA) from its first product until this is
// called (plan/dry_run.cpp, when the dry run ends).
void release_planned_matmul_workspace();

}  // namespace tidal
