#pragma once
// Ring attention for context parallelism (docs/distributed.md, "Context parallel"): the sequence of
// every sample is cut into 2C chunks and CP rank i of C holds chunks i and 2C-1-i (Megatron /
// Transformer Engine's causal load balancing), so each rank has the same share of the causal work.
// Keys and values go around the ring: at step s rank i holds the K/V block of rank j = (i - s) mod C
// and attends its queries to the part of it they see:
//  - s = 0 (its own block): plain causal attention on its two chunks concatenated;
//  - j < i: every local query sees the block's first chunk (chunk j) fully, its second none;
//  - j > i: only the local second chunk of queries sees the block, both its chunks fully.
// The partial outputs are merged with their log-sum-exps in f32 (f64 for f64). Backward calls the
// flash backward per block with the final output and log-sum-exp; dK/dV travel the ring with the
// blocks and come home after C steps. Given a duplicate of the CP communicator, the exchange of the
// next K/V block runs on a worker thread while this one computes on the current block (forward and
// backward); in backward the same exchange carries the previous step's dK/dV on, and the block's
// partial dK/dV arrive during its first flash call; only the last step's, which goes home, blocks.
// Attention dropout draws the mask one call on the whole sequence would draw: every rank reserves
// the range of the whole (B, Hq, T_g, T_g) matrix and each flash call covers one chunk of queries
// against one chunk of keys, a contiguous block of the matrix placed by its AttentionDropoutFrame
// positions (without dropout a step runs on the chunks concatenated, in fewer calls). A sliding
// window (AttentionOptions::window) also runs chunk by chunk, each call masked by the global
// positions of its rows and keys (FlashArgs::diagonal); calls wholly outside the window are skipped.
// Packed documents (AttentionOptions::documents: this rank's rows' global document starts) run chunk
// by chunk as well, each call's keys placed at their global positions (key_offset).
#include <cstdint>
#include <vector>

#include "tidal/dist/communicator.h"
#include "tidal/ops/attention.h"
#include "tidal/tensor.h"

namespace tidal {

// Where a CP rank's two chunks start in a sequence of `seq` tokens: chunk `rank` and chunk
// 2·size-1-rank, each `chunk` = seq / (2·size) tokens long. Throws tidal::Error unless 2·size
// divides seq and 0 <= rank < size.
struct ContextChunks {
  int64_t chunk = 0;
  int64_t first = 0, second = 0;  // start positions in the whole sequence
};
ContextChunks context_chunks(int64_t seq, int size, int rank);
// The global positions of a CP rank's tokens in order, its two chunks (for dropout_rows' frame).
std::vector<int64_t> context_rows(int64_t seq, int size, int rank);

// q (B, Hq, T, D), k (B, Hkv, T, D), v (B, Hkv, T, Dv): this rank's two chunks, T = 2·chunk, as
// scaled_dot_product_attention takes them (GQA, any strides). `cp` is the context-parallel group
// (its rank is the CP rank); `overlap`, when given, a duplicate of it (Communicator::duplicate)
// that carries the K/V blocks from a worker thread; both must outlive the backward. Returns
// (B, Hq, T, Dv) in (B, T, Hq, Dv) memory order, like the flash kernel. Causal flash attention only
// (with or without a sliding window), with or without dropout (opt.dropout_p; no dropout_frame: the ring places the
// blocks itself): anything else is refused with a tidal::Error saying so. On one rank it is
// scaled_dot_product_attention.
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, dist::Communicator& cp,
                      const AttentionOptions& opt = {}, dist::Communicator* overlap = nullptr);

}  // namespace tidal
