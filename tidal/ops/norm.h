#pragma once
// Normalization over the last dim, with fused backward kernels. Both save the input (by reference)
// and per-row statistics in the accumulate dtype (f32 for f32/bf16, f64 for f64), never the output.
#include "tidal/tensor.h"

namespace tidal {

// (x - mean) / sqrt(var + eps) * weight + bias over the last dim (biased variance, like PyTorch).
// weight and bias are (C) or undefined.
Tensor layer_norm(const Tensor& x, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), double eps = 1e-5);
// x * rsqrt(mean(x^2) + eps) * weight over the last dim, as Hugging Face's LlamaRMSNorm (Llama,
// Qwen3): computed in f32 for bf16 and rounded to bf16 before the weight. weight is (C) or undefined.
// weight_offset 1: Gemma's RMSNorm, x * rsqrt(mean(x^2) + eps) * (1 + weight), the product taken in f32
// and rounded once (weight must be given).
Tensor rms_norm(const Tensor& x, const Tensor& weight = Tensor(), double eps = 1e-6, double weight_offset = 0.0);

}  // namespace tidal
