#pragma once
// Context parallelism of `tidal train` (docs/distributed.md, "Context parallel"):
// --context-parallel-size C splits every sample's sequence over C ranks (ops/ring_attention.h with the
// flash kernel, ops/context_gather_attention.h with eager). Each CP group of C ranks (parallel/groups.h)
// reads its DP rank's samples and every rank keeps its two chunks of the tokens and labels.
#include "tidal/dist/communicator.h"
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

// Instruction data (labels -100 where a token is not trained; Note [Masked loss share] in context.cpp): this CP
// rank's targets, labels[:, 1:] in its two chunks (B, 2T/C) on the host, and its share of the micro-batch's masked
// mean: its trained targets over those of the whole micro-batch (summed over the CP group `cp`, null when C = 1), so
// that the C ranks' shares of their local means add up to the mean over all the micro-batch's trained tokens. A rank
// with no trained target gets share 0 and one target set to 0, so that its local mean stays finite.
struct MaskedTargets {
  Tensor targets;  // (B, 2T/C) i64
  double share = 0;
  int64_t count = 0;  // trained targets on this rank
};
MaskedTargets masked_targets(const Tensor& labels, dist::Communicator* cp);  // cp: null without CP
// A rank's share of its micro-batch's masked mean: `count` trained targets here over the count summed over
// the CP group (collective over `cp`; null or one rank: 1), 0 when it has none.
double loss_share(int64_t count, dist::Communicator* cp);

}  // namespace tidal::parallel
