#pragma once
// Scaled-dot-product attention with grouped-query heads: softmax(scale * q k^T + causal mask) v.
// Two kernels with one contract:
//  - eager: Megatron's core attention built from autograd-visible ops (matmul, the fused
//    scaled_masked_softmax below, dropout, matmul). It saves q, k, v, the probabilities, the dropout
//    mask and the dropped probabilities, the activations Korthikanti et al. (2022) count, so a
//    recompute of the core attention is just a re-run.
//  - flash: one fused op (FlashAttention-2): saves q, k, v (by reference), the output and the
//    per-row log-sum-exp (B, Hq, T); backward recomputes the probabilities tile by tile.
// Both draw dropout from the Philox stream the same way (see AttentionOptions::dropout_p), so they
// agree to rounding, dropout included.
#include "tidal/tensor.h"

namespace tidal {

enum class AttentionKernel { eager, flash };

struct AttentionOptions {
  bool causal = true;  // bottom-right aligned: query i sees keys j <= i + S - T (flash-attention's rule)
  double scale = 0;    // 0: 1/sqrt(D)
  // Dropout on the probabilities. Each call reserves B*Hq*T*S Philox positions and draws probability
  // (b, h, i, j) from position start + ((b*Hq + h)*T + i)*S + j, in both kernels.
  double dropout_p = 0;
  AttentionKernel kernel = AttentionKernel::flash;
};

// q (B, Hq, T, D), k (B, Hkv, S, D), v (B, Hkv, S, Dv) with Hq % Hkv == 0 (query head h uses kv head
// h / (Hq / Hkv)); any strides (transposed views of (B, T, H, D) projections are read in place).
// Returns (B, Hq, T, Dv). flash writes it in (B, T, Hq, Dv) memory order, so the caller's
// transpose(1, 2).reshape(B, T, Hq * Dv) is free; eager returns it contiguous. Query rows that see
// no key (causal with T > S) get zeros. f32 and f64 natively; bf16 computes in f32 (eager through
// the ops' bf16 paths, flash by converting tiles as it loads them).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& opt = {});

// The eager path's fused scale + causal mask + softmax over the last dim of scores (..., T, S):
// probs = softmax(scale * scores) with keys j > i + S - T masked out (when causal). Contiguous
// output; its backward saves only the output.
Tensor scaled_masked_softmax(const Tensor& scores, double scale, bool causal);

}  // namespace tidal
