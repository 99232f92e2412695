#include "tidal/backend/cuda/nccl_communicator.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <utility>

#include "tidal/backend/cuda/check.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/dist/communicator_factory.h"
#include "tidal/stream.h"

namespace tidal::cuda {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Runs its function when it goes out of scope (a call's statistics, also when it throws).
struct Recorded {
  std::function<void()> f;
  ~Recorded() { f(); }
};

// Makes `device` the calling thread's current CUDA device for the guard's scope (NCCL uses it).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    TIDAL_CUDA_CHECK(cudaGetDevice(&saved_));
    if (saved_ != device) TIDAL_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(saved_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int saved_ = 0;
};

// An NCCL group (ncclGroupStart .. ncclGroupEnd) that is closed also when a call in it throws.
class Group {
 public:
  Group() { TIDAL_NCCL_CHECK(ncclGroupStart()); }
  void end() {
    open_ = false;
    TIDAL_NCCL_CHECK(ncclGroupEnd());
  }
  ~Group() {
    if (open_) ncclGroupEnd();
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

 private:
  bool open_ = true;
};

// Whether `p` is device memory (NCCL's) rather than host memory, pinned or not (the host
// communicator's). Host pointers CUDA does not know make cudaPointerGetAttributes fail on older
// runtimes: that error is cleared, and the pointer is host memory.
bool on_device(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// Both buffers on the device (true) or both on the host (false).
bool both_on_device(const void* a, const void* b, const char* op) {
  const bool da = on_device(a), db = on_device(b);
  TIDAL_CHECK(da == db, "[nccl] ", op, ": one buffer on the device and the other on the host; give both in one place");
  return da;
}

int64_t total_bytes(const std::vector<dist::Communicator::Transfer>& ts) {
  int64_t n = 0;
  for (const dist::Communicator::Transfer& t : ts) n += t.bytes;
  return n;
}

// Whether every transfer with bytes is device memory (true) or every one host memory (false).
bool transfers_on_device(const std::vector<dist::Communicator::Transfer>& sends,
                         const std::vector<dist::Communicator::Transfer>& receives) {
  int device = 0, host = 0;
  for (const auto* list : {&sends, &receives})
    for (const dist::Communicator::Transfer& t : *list)
      if (t.bytes > 0) ++(on_device(t.data) ? device : host);
  TIDAL_CHECK(device == 0 || host == 0, "[nccl] exchange: ", device, " transfers in device memory and ", host,
              " in host memory; give all of them in one place");
  return device > 0;
}

std::unique_ptr<dist::Communicator> make_nccl(dist::Communicator& host, Device device) {
  return std::make_unique<NcclCommunicator>(host, device);
}

const dist::RegisterCommunicator registered(dist::DistributedBackend::nccl, &make_nccl);

}  // namespace

NcclCommunicator::NcclCommunicator(dist::Communicator& host, Device device)
    : host_(&host), device_(device), rank_(host.rank()), size_(host.size()) {
  TIDAL_CHECK(device.type == DeviceType::cuda,
              "--distributed-backend nccl moves GPU memory: it needs --device cuda, got ",
              device_type_name(device.type));
  DeviceGuard guard(device_.index);
  ncclUniqueId id{};
  if (rank_ == 0) TIDAL_NCCL_CHECK(ncclGetUniqueId(&id));
  host.broadcast(&id, int64_t(sizeof id), 0);  // MPI_Bcast over the world (llm.c's bootstrap)
  TIDAL_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
  share_stats_of(host);
  make_stream();
}

NcclCommunicator::NcclCommunicator(NcclCommunicator& parent, int color, std::unique_ptr<dist::Communicator> host)
    : host_(host.get()), owned_host_(std::move(host)), device_(parent.device_) {
  DeviceGuard guard(device_.index);
  {
    std::lock_guard lock(parent.mutex_);
    TIDAL_NCCL_CHECK(ncclCommSplit(parent.comm_, color, parent.rank_, &comm_, nullptr));
  }
  TIDAL_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
  TIDAL_NCCL_CHECK(ncclCommCount(comm_, &size_));
  TIDAL_CHECK(rank_ == host_->rank() && size_ == host_->size(), "[nccl] a split of ", size_, " ranks where rank ",
              rank_, " is rank ", host_->rank(), " of ", host_->size(),
              " in the host communicator's split: every rank must name the same groups");
  share_stats_of(parent);
  make_stream();
}

void NcclCommunicator::make_stream() {
  TIDAL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  TIDAL_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  TIDAL_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
}

NcclCommunicator::~NcclCommunicator() {
  // No throwing here: the comm stream's work is finished first, so NCCL's buffers are idle.
  int saved = 0;
  cudaGetDevice(&saved);
  cudaSetDevice(device_.index);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (comm_ != nullptr) {
    const ncclResult_t r = ncclCommDestroy(comm_);
    if (r != ncclSuccess) std::fprintf(stderr, "[nccl] ncclCommDestroy failed: %s\n", ncclGetErrorString(r));
  }
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  cudaSetDevice(saved);
}

std::unique_ptr<dist::Communicator> NcclCommunicator::duplicate() {
  // The host's first: where MPI lacks MPI_THREAD_MULTIPLE it throws on every rank before NCCL splits.
  std::unique_ptr<dist::Communicator> host = host_->duplicate();
  return std::unique_ptr<Communicator>(new NcclCommunicator(*this, 0, std::move(host)));
}

std::unique_ptr<dist::Communicator> NcclCommunicator::subgroup(const std::vector<int>& members) {
  dist::check_subgroup(members, rank_, size_);
  std::unique_ptr<dist::Communicator> host = host_->subgroup(members);  // MPI_Comm_split by members.front()
  return std::unique_ptr<Communicator>(new NcclCommunicator(*this, members.front(), std::move(host)));
}

cudaStream_t NcclCommunicator::begin() {
  const cudaStream_t caller = stream_handle(current_stream(device_));
  TIDAL_CUDA_CHECK(cudaEventRecord(ready_, caller));
  TIDAL_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
  return caller;
}

void NcclCommunicator::end(cudaStream_t caller) {
  TIDAL_CUDA_CHECK(cudaEventRecord(done_, stream_));
  TIDAL_CUDA_CHECK(cudaStreamWaitEvent(caller, done_, 0));
}

void NcclCommunicator::all_to_all(const void* send, void* recv, int64_t bytes_per_rank) {
  if (bytes_per_rank == 0 || !both_on_device(send, recv, "all_to_all"))
    return host_->all_to_all(send, recv, bytes_per_rank);  // counts into the shared statistics itself
  std::lock_guard lock(mutex_);
  const int64_t t0 = now_ns();
  Recorded rec{[&] { record(bytes_per_rank * (size_ - 1), bytes_per_rank * (size_ - 1), now_ns() - t0); }};
  DeviceGuard guard(device_.index);
  const cudaStream_t caller = begin();
  const auto* s = static_cast<const char*>(send);
  auto* r = static_cast<char*>(recv);
  const auto n = size_t(bytes_per_rank);
  // NCCL has no all-to-all: a group of sends and receives, one pair per peer; this rank's own block
  // is a device copy on the same stream.
  TIDAL_CUDA_CHECK(cudaMemcpyAsync(r + rank_ * n, s + rank_ * n, n, cudaMemcpyDeviceToDevice, stream_));
  Group group;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    TIDAL_NCCL_CHECK(ncclSend(s + peer * n, n, ncclInt8, peer, comm_, stream_));
    TIDAL_NCCL_CHECK(ncclRecv(r + peer * n, n, ncclInt8, peer, comm_, stream_));
  }
  group.end();
  end(caller);
}

void NcclCommunicator::all_gather(const void* send, void* recv, int64_t bytes_per_rank) {
  if (bytes_per_rank == 0 || !both_on_device(send, recv, "all_gather"))
    return host_->all_gather(send, recv, bytes_per_rank);
  std::lock_guard lock(mutex_);
  const int64_t t0 = now_ns();
  Recorded rec{[&] { record(bytes_per_rank * (size_ - 1), bytes_per_rank * (size_ - 1), now_ns() - t0); }};
  DeviceGuard guard(device_.index);
  const cudaStream_t caller = begin();
  TIDAL_NCCL_CHECK(ncclAllGather(send, recv, size_t(bytes_per_rank), ncclInt8, comm_, stream_));
  end(caller);
}

void NcclCommunicator::exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) {
  if (!transfers_on_device(sends, receives)) return host_->exchange(sends, receives);
  std::lock_guard lock(mutex_);
  const int64_t t0 = now_ns();
  Recorded rec{[&] { record(total_bytes(sends), total_bytes(receives), now_ns() - t0); }};
  DeviceGuard guard(device_.index);
  const cudaStream_t caller = begin();
  // One group: NCCL matches a pair's sends and receives in the order they are issued, as MPI does.
  Group group;
  for (const Transfer& t : receives) {
    TIDAL_ASSERT(t.peer != rank_ && t.peer >= 0 && t.peer < size_);
    if (t.bytes > 0) TIDAL_NCCL_CHECK(ncclRecv(t.data, size_t(t.bytes), ncclInt8, t.peer, comm_, stream_));
  }
  for (const Transfer& t : sends) {
    TIDAL_ASSERT(t.peer != rank_ && t.peer >= 0 && t.peer < size_);
    if (t.bytes > 0) TIDAL_NCCL_CHECK(ncclSend(t.data, size_t(t.bytes), ncclInt8, t.peer, comm_, stream_));
  }
  group.end();
  end(caller);
}

void NcclCommunicator::broadcast(void* data, int64_t bytes, int root) {
  TIDAL_CHECK(root >= 0 && root < size_, "[nccl] broadcast from rank ", root, " of ", size_);
  if (bytes == 0 || !on_device(data)) return host_->broadcast(data, bytes, root);
  std::lock_guard lock(mutex_);
  const int64_t t0 = now_ns();
  Recorded rec{[&] { record(rank_ == root ? bytes * (size_ - 1) : 0, rank_ == root ? 0 : bytes, now_ns() - t0); }};
  DeviceGuard guard(device_.index);
  const cudaStream_t caller = begin();
  TIDAL_NCCL_CHECK(ncclBroadcast(data, data, size_t(bytes), ncclInt8, root, comm_, stream_));
  end(caller);
}

void NcclCommunicator::barrier() {
  host_->barrier();  // a host-side rendezvous, as MPI_Barrier; device work stays queued
}

void NcclCommunicator::abort(int exit_code) {
  if (comm_ != nullptr) ncclCommAbort(comm_);  // no rank stays inside an NCCL kernel waiting for this one
  host_->abort(exit_code);
  std::_Exit(exit_code);  // abort does not return; in case it does
}

}  // namespace tidal::cuda
