#pragma once
// Collectives on tensors, with a deterministic reduction order: a sum over ranks is always added in
// rank order, ((x_0 + x_1) + x_2) + ..., on one rank per element (reduce-scatter by all-to-all, then
// all-gather). The result is bit for bit independent of timing and equals what one process adding
// the ranks' contributions one after another gets — the basis of N-rank/1-rank equivalence
// (docs/distributed.md). Scratch buffers come from the device allocator as `temporary` memory.
#include <string>
#include <vector>

#include "tidal/dist/communicator.h"
#include "tidal/tensor.h"

namespace tidal::dist {

// The range (range_recorder.h, kind op) around a reduction's own kernels: the padding copies and the
// sums in rank order, which a collective library (NCCL) runs inside the collective. The cost model
// charges collectives from their bytes, so its kernel records (plan/kernel_records.h) set these apart.
inline constexpr const char* kReductionRange = "collective_reduction";

// t (contiguous) ← Σ_r t_r on every rank, in place. Any numel (uneven shards are padded).
void all_reduce_sum(Communicator& comm, const Tensor& t);
// out (contiguous, numel n) ← Σ_r in_r[rank·n, (rank+1)·n); in holds size·n elements, same dtype.
void reduce_scatter_sum(Communicator& comm, const Tensor& out, const Tensor& in);
// out (contiguous, size·n elements) ← every rank's `in` (n elements) in rank order.
void all_gather(Communicator& comm, const Tensor& out, const Tensor& in);
// t ← rank `root`'s t, in place.
void broadcast(Communicator& comm, const Tensor& t, int root);

// One message of `exchange`: the bytes of `data` (contiguous; a view into a larger tensor) to or from `peer`.
struct TensorTransfer {
  int peer;
  Tensor data;
};
// Communicator::exchange on tensors' bytes, with its matching rules. Device tensors go to a
// communicator that reads device memory (NCCL) as they are; to one that does not (MPI) they are
// staged through host buffers: every distinct send view copied to the host once, the receives copied
// back after the exchange. The writes bypass autograd (no version bump), as the communicator's own
// do. Meta tensors hold no bytes: their transfers are left out.
void exchange(Communicator& comm, const std::vector<TensorTransfer>& sends,
              const std::vector<TensorTransfer>& receives);

// Per item of `flags` (one byte each, 0 or 1; the same length on every rank): 1 where any rank's is set.
std::string any_rank(Communicator& comm, const std::string& flags);

// Host scalars (losses, counts, norms): every rank's value, in rank order; and their sum in rank order.
std::vector<double> all_gather_values(Communicator& comm, double mine);
double all_reduce_sum(Communicator& comm, double mine);
double all_reduce_max(Communicator& comm, double mine);

}  // namespace tidal::dist
