#pragma once
// What chunked loss and the swap optimizer save, as formulas (docs/memory.md, "Chunked loss" and
// "Swap optimizer"). The out-of-memory advice, the memory report and the planner use these; the
// tests check them against the allocator to the byte. Sizes are in bytes.
#include <cstdint>
#include <vector>

#include "tidal/dtype.h"

namespace tidal::memory {

// ---- Chunked loss. N = b * s tokens, C hidden size, V vocabulary; `element_size` is the logits'
// (the model's dtype in the default mode: 2 under --bf16; the chunked loss computes in f32: 4 for
// f32 and bf16 models, 8 for f64).

// Peak of MemoryCategory::logits over a step: N * V * element_size in the default mode (the
// logits of the whole micro-batch), min(chunk, N) * V * element_size in chunk mode (chunk = 0:
// default mode).
int64_t chunked_loss_logits_bytes(int64_t batch, int64_t seq, int64_t vocab, int64_t chunk, int64_t element_size = 4);

struct LossHeadMemory {
  int64_t logits = 0;  // peak of the logits category (chunked_loss_logits_bytes)
  int64_t saved = 0;   // activation bytes the head and loss keep from forward to backward
  int64_t peak = 0;    // highest bytes the head and loss hold at once over forward + backward
};
// The LM head + loss of one micro-batch of a step that trains both the head weight and the hidden
// states, whose parameters and activations are `dtype` (f32, or bf16 under --bf16: p = 4 or 2 bytes
// an element). default: the head input (N, C), the logits (N, V) with the loss's f32 log-sum-exp (N)
// and targets (N, i64), then in backward the logits' gradient (N, V) next to them, then the
// gradients (N, C) and (V, C) next to the logits' gradient — all but the log-sum-exp in `dtype`.
// chunk: the loss computes in f32 — f32 copies of a bf16 input and weight, one f32 (chunk, V) block,
// the f32 gradients (N, C) and (V, C) and the per-row losses (N) during forward; it keeps the two
// gradients cast to `dtype`. Add `peak` to the activations held at the end of forward to get the
// step's peak near the loss.
LossHeadMemory loss_head_memory(int64_t batch, int64_t seq, int64_t hidden, int64_t vocab, int64_t chunk,
                                DType dtype = DType::f32);

// What switching the default mode to `chunk` takes off the device peak of the loss: the difference
// of the two loss_head_memory peaks (negative when chunking costs memory: tiny N against C).
int64_t chunked_loss_savings(int64_t batch, int64_t seq, int64_t hidden, int64_t vocab, int64_t chunk,
                             DType dtype = DType::f32);

// ---- Swap optimizer. AdamW's states per element: exp_avg and exp_avg_sq (f32; f64 for f64
// parameters) and the f32 master weight of a bf16 parameter: 8, 12 or 16 bytes.

struct SwapParam {
  int64_t numel = 0;
  DType dtype = DType::f32;  // the parameter's dtype
};
int64_t swap_state_bytes_per_element(DType param_dtype);

// Elements [begin, end) of parameter `param`: the part of it a window updates.
struct SwapPiece {
  size_t param = 0;
  int64_t begin = 0, end = 0;
};
struct SwapWindow {
  std::vector<SwapPiece> pieces;
  int64_t device_bytes = 0;  // its device buffer: every state of every piece, each 64-byte aligned
};
// Splits the parameters, in order, into K windows of about equal state bytes; a window boundary
// falls between parameters or inside one at a multiple of 64 elements (a big embedding is spread
// over several windows). Needs 1 <= K <= the number of non-empty parameters.
std::vector<SwapWindow> plan_swap_windows(const std::vector<SwapParam>& params, int64_t K);

// Device optimizer_state peak of a swapped step: two buffers of the largest window (one for K = 1):
// window i is updated in one while i - 1 is copied out of the other and then i + 1 copied in.
int64_t swap_optimizer_device_bytes(const std::vector<SwapParam>& params, int64_t K);
// The same from the total state bytes alone, for planners without the parameter list: 2 ceil(S / K)
// (S for K = 1); the exact figure differs by the 64-byte alignment of each piece.
int64_t swap_optimizer_device_bytes(int64_t state_bytes, int64_t K);

}  // namespace tidal::memory
