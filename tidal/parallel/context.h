#pragma once
// Context parallelism of `tidal train` (docs/distributed.md, "Context parallel"):
// --context-parallel-size C splits every sample's sequence over C ranks (ops/ring_attention.h with the
// flash kernel, ops/context_gather_attention.h with eager).
// The ranks form contiguous blocks of C (the CP groups); the data-parallel groups are strided
// across them, world = DP x C. Each CP group reads its DP rank's samples and every rank keeps its
// two chunks of the tokens and labels.
#include <cstdint>
#include <memory>

#include "tidal/base/flags.h"
#include "tidal/dist/communicator.h"
#include "tidal/tensor.h"

namespace tidal::parallel {

struct ContextParallelConfig {
  int64_t size = 1;  // C; 1: off
  bool enabled() const { return size > 1; }
};

// --context-parallel-size, added to `tidal train`'s table, and its typed value.
Flags& add_context_parallel_flags(Flags& f);
ContextParallelConfig parse_context_parallel(const Flags& f);
// Refuses a --seq-length that 2C does not divide, naming the flags. No-op when C is 1.
void check_context_parallel(int64_t seq_length, int64_t context_parallel);

// The groups of a run of `world.size()` ranks: CP groups are contiguous blocks of C ranks, DP
// groups strided across them, and a duplicate of the CP group that moves the ring's K/V blocks from
// a worker thread while attention computes (null where MPI offers no MPI_THREAD_MULTIPLE: the
// exchanges then block). A collective (every rank builds its groups). Throws tidal::Error unless C
// divides the ranks.
struct ContextParallelGroups {
  std::unique_ptr<dist::Communicator> cp, dp, ring;
};
ContextParallelGroups context_parallel_groups(dist::Communicator& world, const ContextParallelConfig& c);

// This CP rank's two chunks of every sample: the inputs and labels of a (B, T+1) batch of tokens,
// each (B, 2T/C). The whole sequence (C == 1): tokens[:, :T] and tokens[:, 1:].
struct LocalTokens {
  Tensor inputs, labels;
};
LocalTokens local_tokens(const Tensor& tokens, int cp_size, int cp_rank);

}  // namespace tidal::parallel
