#pragma once
// The plain parameter structs and op codes that ops/ hands to a device's kernels (seam/kernels.h).
// Device-neutral: every backend reads the same structs.
#include <cstdint>

namespace tidal {

class Tensor;

// --- elementwise
// The gate activation of a gated MLP: out = act(gate) * up. silu: SwiGLU (Llama, Qwen, Mistral);
// gelu_tanh: GeGLU with GELU's tanh form (Gemma's gelu_pytorch_tanh).
enum class GluActivation : uint8_t { silu, gelu_tanh };
inline const char* glu_name(GluActivation a) { return a == GluActivation::silu ? "swiglu" : "geglu"; }

enum class Unary : uint8_t {
  neg,
  exp,
  log,
  sqrt,
  rsqrt,
  abs,
  sign,
  tanh,
  sigmoid,
  relu,
  square,
  reciprocal,
  sin,
  cos,
  add_scalar,   // x + s
  mul_scalar,   // x * s
  rsub_scalar,  // s - x
  rdiv_scalar,  // s / x
  pow_scalar,   // x ^ s
  clamp_min,    // max(x, s)
  clamp_max,    // min(x, s)
};
enum class Binary : uint8_t { add, sub, mul, div, pow, maximum, minimum };
enum class Compare : uint8_t { eq, ne, lt, le, gt, ge };

// --- softmax over dim of a contiguous (outer, n, inner) view
struct SoftmaxArgs {
  int64_t outer = 1, n = 1, inner = 1;
  bool log = false;  // log_softmax
};

// --- layer / RMS norm over the last dim of contiguous (rows, cols)
struct NormArgs {
  int64_t rows = 0;
  int64_t cols = 0;
  double eps = 0.0;
  // RMS norm only. 0: Hugging Face's LlamaRMSNorm, normalized x rounded to the input dtype, then times
  // the weight. Else Gemma's RMSNorm: times (weight_offset + w) in the accumulate dtype, then rounded.
  double weight_offset = 0.0;
};

// --- RoPE cos/sin tables (ops/rope.h): angle(t, i) = (position_offset + t) * inv_freq[i mod D/2], and
// cos/sin multiplied by attention_scaling (YaRN's attention factor, 1 otherwise). The frequencies carry
// the rope type's scaling (ops/rope_scaling.h), computed once on the host.
struct RopeTableArgs {
  const double* inv_freq = nullptr;  // D/2 host values
  double attention_scaling = 1.0;
  int64_t position_offset = 0;
};

// --- Sinkhorn-Knopp projection (ops/sinkhorn.h) of contiguous (matrices, n, n) positive matrices onto
// doubly stochastic ones: a column normalization, then iters - 1 rounds of row then column
// normalization, each dividing by (sum + eps) (DeepSeek-V4's mHC residual mapping).
struct SinkhornArgs {
  int64_t matrices = 0;
  int64_t n = 0;
  int64_t iters = 1;
  double eps = 0.0;
};

// --- packed sequences (Megatron's --reset-attention-mask): several documents share one row of the
// batch and attention does not cross their boundaries. Query row i of sample b sees only the keys of
// its document: key j of a call is visible iff key_offset + j >= start[b * stride_b + i * stride_t]
// (besides the causal and window rules). start holds i32 document starts on the kernel's device,
// non-decreasing along each row (documents are contiguous); null: no document mask (and on meta).
struct DocumentMask {
  const int32_t* start = nullptr;
  int64_t stride_b = 0, stride_t = 0;
  int64_t key_offset = 0;  // the documents' index of the call's key 0 (context parallelism's blocks)
  bool any() const { return start != nullptr; }
  // The first key (of the call) query row i of sample b may see.
  int64_t first_key(int64_t b, int64_t i) const {
    return start == nullptr ? 0 : int64_t(start[b * stride_b + i * stride_t]) - key_offset;
  }
};

// --- the eager attention's fused scale + mask + softmax (ops/attention.h scaled_masked_softmax) over
// contiguous scores (..., T, S): row r is query r % T; with documents, of sample r / (rows / batch).
struct MaskedSoftmaxArgs {
  double scale = 1.0;
  bool causal = true;
  int64_t window = 0;  // sliding window (causal only); 0: none
  DocumentMask documents;
  int64_t batch = 1;  // the scores' leading dim when documents are given
};

// --- flash attention
struct FlashArgs {
  double scale = 1.0;
  bool causal = true;  // bottom-right aligned: query i sees keys j <= i + S - T
  // Dropout as tidal::dropout draws it (keep where uniform >= float(p), scale 1/(1-p)); 0: none.
  // Probability (b, h, i, j) uses Philox key `seed` at position
  //   rng_start + ((b*Hq + h)*T_g + rng_row_offset + i)*S_g + rng_col_offset + j
  // where this call is the block at (rng_row_offset, rng_col_offset) of a (T_g, S_g) = (rng_rows,
  // rng_cols) attention matrix (context parallelism draws each block as the whole matrix would);
  // rng_rows/rng_cols 0 mean this call's T and S, so the defaults give rng_start + ((b*Hq + h)*T + i)*S + j.
  double dropout_p = 0;
  uint64_t seed = 0;
  uint64_t rng_start = 0;
  int64_t rng_row_offset = 0, rng_col_offset = 0;
  int64_t rng_rows = 0, rng_cols = 0;
  // Sliding window (causal only): query i's diagonal is key diag(i) = i + S - T + diagonal; it sees
  // keys diag(i) - window < j <= diag(i). window 0: no window (every key up to the diagonal).
  int64_t window = 0;
  // Shifts every row's diagonal: context parallelism's blocks, whose rows and keys sit at other global
  // positions than the bottom-right frame puts them (0 for one call on the whole matrix).
  int64_t diagonal = 0;
  DocumentMask documents;  // packed sequences: none by default
  // Compressed keys (DeepSeek-V4's heavily compressed entries): key j stands for the key_rate positions
  // [j R, (j + 1) R) and query i sees it once they are all past, (j + 1) R <= i + 1: keys [0, (i + 1) / R).
  // Causal only, without window, diagonal or documents. 0: keys are positions (the rules above).
  int64_t key_rate = 0;
  // Backward only: the gradient of the forward's log-sum-exp (B, Hq, T), contiguous in the accumulate type on
  // the kernel's device, when the caller used it (ops/attention.h attention_with_lse); null: none. Row i's
  // softmax backward then takes delta_i = rowsum(dO * O)_i - dlse_i, as d lse_i / d s_ij = P_ij.
  const void* lse_grad = nullptr;
};

// The keys [first, end) that query row i of a (T, S) attention sees (first == end: none); the rule
// of FlashArgs' mask (diagonal 0 for the eager softmax). first and end never decrease with i.
struct KeyRange {
  int64_t first = 0, end = 0;
};
inline KeyRange visible_key_range(bool causal, int64_t window, int64_t diagonal, int64_t i, int64_t t, int64_t s) {
  if (!causal) return {0, s};
  const auto clamp = [s](int64_t x) { return x < 0 ? 0 : (x > s ? s : x); };
  const int64_t diag = i + s - t + diagonal, end = clamp(diag + 1);
  const int64_t first = window > 0 ? clamp(diag - window + 1) : 0;
  return {first < end ? first : end, end};
}
// The same with a document mask: row i of sample b also sees no key before its document's start.
// first never decreases with i either (document starts do not).
inline KeyRange visible_key_range(bool causal, int64_t window, int64_t diagonal, const DocumentMask& docs, int64_t b,
                                  int64_t i, int64_t t, int64_t s) {
  KeyRange r = visible_key_range(causal, window, diagonal, i, t, s);
  if (docs.any()) {
    const int64_t floor = docs.first_key(b, i);
    if (floor > r.first) r.first = floor < r.end ? floor : r.end;
  }
  return r;
}
inline KeyRange visible_key_range(const FlashArgs& a, int64_t b, int64_t i, int64_t t, int64_t s) {
  if (a.key_rate > 0) {
    const int64_t end = (i + 1) / a.key_rate;
    return {0, end < s ? end : s};
  }
  return visible_key_range(a.causal, a.window, a.diagonal, a.documents, b, i, t, s);
}

// The query rows [first, end) that see some key of [j0, j1) under a's mask (the inverse of the above).
struct RowRange {
  int64_t first = 0, end = 0;
};
inline RowRange rows_seeing_keys(const FlashArgs& a, int64_t j0, int64_t j1, int64_t t, int64_t s) {
  if (!a.causal) return {0, t};
  const auto clamp = [t](int64_t x) { return x < 0 ? 0 : (x > t ? t : x); };
  if (a.key_rate > 0) return {clamp((j0 + 1) * a.key_rate - 1), t};  // row i sees key j0 once (j0 + 1) R <= i + 1
  // Row i sees key j iff diag(i) - window < j <= diag(i), diag(i) = i + s - t + diagonal.
  const int64_t shift = s - t + a.diagonal, first = clamp(j0 - shift);
  const int64_t end = a.window > 0 ? clamp(j1 - 1 - shift + a.window) : t;
  return {first, end > first ? end : first};
}
// The same for sample b under a's document mask: rows whose document starts after key j1 - 1 see
// none of the keys (document starts never decrease, so those rows are a suffix).
inline RowRange rows_seeing_keys(const FlashArgs& a, int64_t b, int64_t j0, int64_t j1, int64_t t, int64_t s) {
  RowRange r = rows_seeing_keys(a, j0, j1, t, s);
  if (!a.documents.any()) return r;
  int64_t lo = r.first, hi = r.end;  // the first row of [lo, hi) whose first key is >= j1
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (a.documents.first_key(b, mid) >= j1)
      hi = mid;
    else
      lo = mid + 1;
  }
  r.end = lo;
  return r;
}

// --- dropout of a piece of a larger tensor (ops/random.h dropout_rows): x contiguous, seen as
// (outer, rows, inner); element (o, t, c) draws Philox key `seed` at position
//   start + (o*global_rows + g(t))*global_inner + col_offset + c,   g(t) = row_map ? row_map[t] : row_offset + t.
struct DropoutRowsArgs {
  int64_t outer = 1, rows = 1, inner = 1;
  int64_t global_rows = 0, global_inner = 0;  // the whole tensor's row count and row length
  int64_t row_offset = 0, col_offset = 0;
  const int64_t* row_map = nullptr;  // `rows` entries (host memory), or nullptr
  uint64_t seed = 0, start = 0;
};

// --- cross-entropy over rows of logits (rows, vocab)
struct CrossEntropyArgs {
  int64_t rows = 0;
  int64_t vocab = 0;
  int64_t row_stride = 0;  // elements from one row of the logits to the next
  int64_t ignore_index = -100;
};
struct CrossEntropySums {
  double loss = 0.0;  // sum of the row losses, added in row order
  int64_t count = 0;  // rows whose target is not ignored
};

// --- the LM head and cross-entropy by chunks of rows (ops/chunked_loss.h)
struct ChunkedLossArgs {
  int64_t rows = 0;    // N: hidden rows (tokens)
  int64_t hidden = 0;  // C
  int64_t vocab = 0;   // V
  int64_t chunk = 0;   // rows per chunk
  int64_t ignore_index = -100;
  double grad_scale = 0;  // 1 / (non-ignored rows): the mean's factor, folded into the gradients
};

// --- AdamW (optim/adamw.h)
struct AdamWArgs {
  double lr = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // already 0 for no-decay parameters
  int64_t step = 1;         // the parameter's step count including this update
};

// One tensor of a multi-tensor AdamW step (Kernels::adamw_multi_step): adamw_step's operands and its
// own arguments (the step count and the weight decay differ between tensors). Every pointer but
// bf16_param is non-null; master points at an undefined tensor unless param is bf16. bf16_param, when
// set, is written from the updated param as Kernels::copy converts (param is then the f32 master copy
// of that bf16 parameter and grad is f32: --bf16's f32 gradient sums, optim/adamw.h).
struct AdamWTensors {
  const Tensor* param = nullptr;
  const Tensor* grad = nullptr;
  const Tensor* exp_avg = nullptr;
  const Tensor* exp_avg_sq = nullptr;
  const Tensor* master = nullptr;
  const Tensor* bf16_param = nullptr;
  AdamWArgs args;
};

// One product of Kernels::matmul_many: out = alpha * a @ b + beta * out, under matmul's contract.
struct MatmulTask {
  const Tensor* out = nullptr;
  const Tensor* a = nullptr;
  const Tensor* b = nullptr;
  double alpha = 1.0, beta = 0.0;
};

// --- random draws at Philox stream positions start + i (ops/random.h)
enum class Distribution : uint8_t { uniform, normal };

}  // namespace tidal
