#pragma once
// Context parallelism of `tidal train` (docs/distributed.md, "Context parallel"):
// --context-parallel-size C splits every sample's sequence over C ranks (ops/ring_attention.h with the
// flash kernel, ops/context_gather_attention.h with eager). Each CP group of C ranks (parallel/groups.h)
// reads its DP rank's samples and every rank keeps its two chunks of the tokens and labels.
#include "tidal/tensor.h"

namespace tidal::parallel {

// This CP rank's two chunks of every sample: the inputs and labels of a (B, T+1) batch of tokens,
// each (B, 2T/C). The whole sequence (C == 1): tokens[:, :T] and tokens[:, 1:].
struct LocalTokens {
  Tensor inputs, labels;
};
LocalTokens local_tokens(const Tensor& tokens, int cp_size, int cp_rank);
// This CP rank's two chunks of x (B, T, ...) along dim 1: (B, 2T/C, ...); x itself when C == 1.
Tensor local_rows(const Tensor& x, int cp_size, int cp_rank);

}  // namespace tidal::parallel
