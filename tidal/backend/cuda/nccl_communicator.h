#pragma once
// dist::Communicator over NCCL (--distributed-backend nccl; docs/cuda.md), bootstrapped as llm.c
// does: rank 0 makes the unique id (ncclGetUniqueId), the host communicator (MPI's world, or the
// one-rank communicator) broadcasts it, every rank joins with ncclCommInitRank. Subgroups and
// duplicates are ncclCommSplit of it, mirrored by the same split of the host communicator.
//
// Device buffers move through NCCL on this communicator's own CUDA stream, ordered after the calling
// thread's current stream on the device and before its later work by events (cudaStreamWaitEvent
// both ways): a collective returns once queued, and whatever the caller queues next on its stream
// sees the result. Host buffers (losses, flags, strings: dist::all_gather_values) go through the
// host communicator, which blocks. Statistics time the host call (queueing, for NCCL).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <mutex>

#include "tidal/base/error.h"
#include "tidal/device.h"
#include "tidal/dist/communicator.h"

namespace tidal::cuda {

class NcclCommunicator final : public dist::Communicator {
 public:
  // Over host's ranks, on CUDA device `device`: a collective of `host`, which must outlive this one.
  NcclCommunicator(dist::Communicator& host, Device device);
  ~NcclCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  bool reads_device_memory() const override { return true; }
  std::unique_ptr<Communicator> duplicate() override;
  std::unique_ptr<Communicator> subgroup(const std::vector<int>& members) override;
  void all_to_all(const void* send, void* recv, int64_t bytes_per_rank) override;
  void all_gather(const void* send, void* recv, int64_t bytes_per_rank) override;
  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) override;
  void broadcast(void* data, int64_t bytes, int root) override;
  void barrier() override;
  [[noreturn]] void abort(int exit_code) override;

 private:
  // A split of `parent` (ncclCommSplit by `color`), over the host communicator `host` split alike.
  NcclCommunicator(NcclCommunicator& parent, int color, std::unique_ptr<dist::Communicator> host);
  void make_stream();
  // The caller's current stream on the device; the comm stream waits for its work so far.
  cudaStream_t begin();
  // The caller's stream waits for everything queued on the comm stream.
  void end(cudaStream_t caller);

  dist::Communicator* host_;                        // MPI (or single): host buffers, bootstrap, barrier
  std::unique_ptr<dist::Communicator> owned_host_;  // a split's or duplicate's own host communicator
  Device device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  int rank_ = 0, size_ = 1;
  std::mutex mutex_;  // one call at a time on this communicator (its stream and events)
};

}  // namespace tidal::cuda

// NCCL's errors as tidal errors, with NCCL's words and the call.
#define TIDAL_NCCL_CHECK(call)                                                                                         \
  do {                                                                                                                 \
    const ncclResult_t tidal_nccl_result_ = (call);                                                                    \
    if (tidal_nccl_result_ != ncclSuccess) [[unlikely]]                                                                \
      ::tidal::detail::throw_error(::tidal::detail::str_cat(                                                           \
          "[nccl] ", #call, " failed: ", ncclGetErrorString(tidal_nccl_result_), " (", __FILE__, ":", __LINE__, ")")); \
  } while (0)
