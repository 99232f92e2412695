// The CUDA backend's runtime (seam/runtime.h): device memory from cudaMalloc and pinned host memory
// from cudaHostAlloc, both under tidal's caching allocators (allocator.h: categories, peaks, the event
// log and the TIDAL_DEVICE_MEMORY cap work as on the CPU), and CUDA streams (stream.h). Nothing here
// runs while the program starts: a machine without a GPU links this backend and fails only when a
// cuda tensor is made, with CUDA's reason.
#include <cstdlib>

#include "tidal/backend/cuda/check.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/base/error.h"
#include "tidal/seam/registry.h"

namespace tidal::cuda {
namespace {

// `p` if the allocation `e` succeeded; nullptr when memory is full (the allocator frees its cache and
// retries, then reports out of memory); any other error thrown.
void* allocated_or_null(cudaError_t e, void* p) {
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;
  }
  TIDAL_CUDA_CHECK(e);
  return p;
}

void* device_alloc(int64_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, size_t(bytes));
  return allocated_or_null(e, p);
}

void device_free(void* ptr, int64_t) { TIDAL_CUDA_CHECK(cudaFree(ptr)); }

// Page-locked host memory: what asynchronous copies need to overlap compute (offload, swap optimizer).
void* pinned_alloc(int64_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, size_t(bytes), cudaHostAllocPortable);
  return allocated_or_null(e, p);
}

void pinned_free(void* ptr, int64_t) { TIDAL_CUDA_CHECK(cudaFreeHost(ptr)); }

void* pageable_alloc(int64_t bytes) { return std::aligned_alloc(64, size_t((bytes + 63) / 64 * 64)); }
void pageable_free(void* ptr, int64_t) { std::free(ptr); }

class CudaRuntime final : public DeviceRuntime {
 public:
  // Kernels run after the host freed their scratch: the allocator orders cross-stream reuse (Note
  // [Cross-stream reuse], allocator_streams.h).
  MemoryBacking device_backing() override {
    return {.alloc = device_alloc, .free = device_free, .touches_memory = true, .stream_ordered = true};
  }
  // Pinned memory is slow to take (every page locked): after the first step its cached blocks become one
  // pool (Allocator::pool_cached_blocks). No kernel touches it and copies hold it: no stream order.
  MemoryBacking host_backing(HostMemory kind) override {
    if (kind == HostMemory::pinned)
      return {.alloc = pinned_alloc, .free = pinned_free, .touches_memory = true, .pool_after_first_step = true};
    return {pageable_alloc, pageable_free, true};
  }
  std::unique_ptr<detail::StreamImpl> make_stream(const std::string& name, bool compute) override {
    return cuda::make_stream(name, compute);
  }
  // cudaSetDevice(index) after checking it against the devices there are: a missing driver or GPU, or an
  // index past the last, is a tidal::Error with CUDA's reason.
  void select(int index) override {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      detail::throw_error(detail::str_cat("[cuda] cannot use cuda:", index, ": ", cudaGetErrorString(e)));
    }
    TIDAL_CHECK(count > 0, "[cuda] cannot use cuda:", index, ": no CUDA device here");
    TIDAL_CHECK(index >= 0 && index < count, "[cuda] cuda:", index, " does not exist: this machine has ", count,
                " CUDA device", count == 1 ? "" : "s", " (cuda:0",
                count > 1 ? detail::str_cat(" to cuda:", count - 1) : "", ")");
    TIDAL_CUDA_CHECK(cudaSetDevice(index));
  }
};

[[gnu::init_priority(kRegisterBackends)]] const RegisterRuntime<CudaRuntime> registered(DeviceType::cuda);

}  // namespace
}  // namespace tidal::cuda
