#pragma once
// The all-to-all of rows with any counts (MPI's Alltoallv) as a differentiable op: expert parallelism's
// token dispatch and return (models/moe.h, docs/distributed.md "Expert parallel"). Its backward is the
// reverse exchange, run on every rank in the order backward reaches it (the same everywhere: every
// rank's graph has the same exchanges, in the same dependency order).
#include <cstdint>
#include <vector>

#include "tidal/dist/communicator.h"
#include "tidal/tensor.h"

namespace tidal {

// x (rows, ...): its first send[0] rows go to rank 0 of `comm`, the next send[1] to rank 1, …; the
// result (Σ recv, ...) holds recv[0] rows from rank 0, then recv[1] from rank 1, …. send[r] here must
// be recv[this rank] on rank r (exchange the counts first: dist::Communicator::all_to_all). Every rank
// of `comm` calls it, in the same order, also with no rows to send or receive. On the meta device it
// allocates the result and moves nothing. `comm` must outlive the graph (the backward exchanges on it).
Tensor all_to_all_rows(dist::Communicator& comm, const Tensor& x, const std::vector<int64_t>& send,
                       const std::vector<int64_t>& recv);

}  // namespace tidal
