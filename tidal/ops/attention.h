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
#include <optional>

#include "tidal/ops/random.h"
#include "tidal/tensor.h"

namespace tidal {

enum class AttentionKernel { eager, flash };
inline const char* name(AttentionKernel k) { return k == AttentionKernel::eager ? "eager" : "flash"; }

// Where a call's (T, S) attention matrix sits in a larger (T_g, S_g) one whose dropout mask it must
// reproduce: context parallelism's ring attention computes the whole matrix as blocks, on several
// ranks. Probability (b, h, i, j) of the block draws position
//   rng.start + ((b*Hq + h)*T_g + row_offset + i)*S_g + col_offset + j,
// the position one call on the whole matrix draws for it. The default frame is the call itself.
struct AttentionDropoutFrame {
  int64_t row_offset = 0;  // the block's first query row in the whole matrix
  int64_t col_offset = 0;  // the block's first key column
  int64_t rows = 0;        // T_g; 0: this call's T
  int64_t cols = 0;        // S_g; 0: this call's S
  // The range reserved once for the whole matrix (B*Hq*T_g*S_g positions: reserve_attention_dropout);
  // unset: this call reserves that many itself, as a call without a frame does.
  std::optional<RandomRange> rng;
};

struct AttentionOptions {
  bool causal = true;  // bottom-right aligned: query i sees keys j <= i + S - T (flash-attention's rule)
  // Sliding window (Mistral, Qwen2, Gemma 3's local layers; Hugging Face's sliding_window): W > 0 keys
  // up to and including the diagonal, query i sees i + S - T - W < j <= i + S - T. Causal only; a
  // window >= S is plain causal attention. The flash kernels skip the key tiles outside it.
  int64_t window = 0;  // 0: no window
  double scale = 0;    // 0: 1/sqrt(D)
  // Dropout on the probabilities. Each call reserves B*Hq*T*S Philox positions and draws probability
  // (b, h, i, j) from position start + ((b*Hq + h)*T + i)*S + j, in both kernels (with a
  // dropout_frame: the positions above, from the frame's range).
  double dropout_p = 0;
  AttentionDropoutFrame dropout_frame;
  AttentionKernel kernel = AttentionKernel::flash;
  // Packed sequences (Megatron's --reset-attention-mask): several documents in one row of the batch,
  // attention never crossing their boundaries. documents (B, T) i32 on q's device holds for each query
  // row the index of its document's first key, counted in a frame where this call's key 0 is key
  // `key_offset` (0: the call's own keys; context parallelism's blocks sit further on). Query i of
  // sample b then sees only keys j with key_offset + j >= documents[b, i], besides the causal and
  // window rules. Starts never decrease along a row (documents are contiguous). Undefined: no mask.
  Tensor documents;
  int64_t key_offset = 0;
  // Compressed keys (DeepSeek-V4's heavily compressed entries, FlashArgs::key_rate): key j stands for the
  // key_rate positions [j R, (j + 1) R) and query i sees keys j < (i + 1) / R, those whose positions are all
  // past. Flash only, causal, without window, documents or dropout. 0: none.
  int64_t key_rate = 0;
};

// Reserves the dropout range of a whole (B, Hq, T_g, S_g) attention matrix computed as blocks
// (every context-parallel rank reserves it, so the streams stay in step).
RandomRange reserve_attention_dropout(int64_t batch, int64_t q_heads, int64_t rows, int64_t cols);

// q (B, Hq, T, D), k (B, Hkv, S, D), v (B, Hkv, S, Dv) with Hq % Hkv == 0 (query head h uses kv head
// h / (Hq / Hkv)); any strides (transposed views of (B, T, H, D) projections are read in place).
// Returns (B, Hq, T, Dv). flash writes it in (B, T, Hq, Dv) memory order, so the caller's
// transpose(1, 2).reshape(B, T, Hq * Dv) is free; eager returns it contiguous. Query rows that see
// no key (causal with T > S) get zeros. f32 and f64 natively; bf16 computes in f32 (eager through
// the ops' bf16 paths, flash by converting tiles as it loads them).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& opt = {});

// Flash attention that also returns each row's log-sum-exp, differentiable:
//   lse[b, h, i] = log sum_j exp(scale q_i . k_j) over the keys row i sees, (B, Hq, T) in f32 (f64 for f64),
//   +inf for rows that see no key (their out is 0).
// With it a caller merges this attention with keys it scores itself (a sink logit, entries gathered per query):
// a softmax over [lse, other logits] weighs out against the other values exactly as one softmax over all the keys
// would (DeepSeek-V4's attention, models/deepseek_v4_attention.cpp). Backward takes both gradients; the
// probabilities are recomputed tile by tile as scaled_dot_product_attention's flash kernel does. opt.kernel must be
// flash.
struct AttentionWithLse {
  Tensor out;  // (B, Hq, T, Dv) in (B, T, Hq, Dv) memory order
  Tensor lse;  // (B, Hq, T)
};
AttentionWithLse attention_with_lse(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& opt = {});

// The eager path's fused scale + causal mask + softmax over the last dim of scores (..., T, S):
// probs = softmax(scale * scores) with keys j > i + S - T masked out (when causal), and with a
// window W > 0 (causal only) keys j <= i + S - T - W too; rows that see no key are zeros.
// Contiguous output; its backward saves only the output.
// With documents (B, T) i32 (scores (B, H, T, S); AttentionOptions::documents, key_offset), row i of
// sample b also masks the keys before its document's start.
Tensor scaled_masked_softmax(const Tensor& scores, double scale, bool causal, int64_t window = 0,
                             const Tensor& documents = Tensor(), int64_t key_offset = 0);

}  // namespace tidal
