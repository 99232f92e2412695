// The CPU backend's runtime (seam/runtime.h): memory from the system allocator, streams on threads.
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

#include "tidal/backend/cpu/stream.h"
#include "tidal/seam/registry.h"

namespace tidal::cpu {
namespace {

constexpr int64_t kHugeThreshold = int64_t(4) << 20;
constexpr int64_t kHugePage = int64_t(2) << 20;

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// Large blocks are mapped from the system directly, 2 MiB aligned and advised as huge pages (fewer TLB misses,
// faster first touch), and unmapped when freed: the process's resident memory drops at once. From malloc, a freed
// block below glibc's mmap threshold (which grows up to 32 MiB as large blocks are freed) stays in its heap,
// resident. Smaller blocks come from malloc, 64-byte aligned.
void* cpu_alloc(int64_t bytes) {
  if (bytes < kHugeThreshold) return std::aligned_alloc(64, size_t(round_up(bytes, 64)));
  const size_t size = size_t(round_up(bytes, kHugePage));
  char* raw = static_cast<char*>(
      mmap(nullptr, size + size_t(kHugePage), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (raw == MAP_FAILED) return nullptr;
  char* start = reinterpret_cast<char*>(round_up(int64_t(reinterpret_cast<uintptr_t>(raw)), kHugePage));
  if (start > raw) munmap(raw, size_t(start - raw));  // the mapping's head and tail beyond the aligned block
  if (char* end = start + size; end < raw + size + size_t(kHugePage))
    munmap(end, size_t(raw + size + size_t(kHugePage) - end));
  madvise(start, size, MADV_HUGEPAGE);
  return start;
}

void cpu_free(void* ptr, int64_t bytes) {
  if (bytes < kHugeThreshold) return std::free(ptr);
  munmap(ptr, size_t(round_up(bytes, kHugePage)));
}

MemoryBacking device_backing_of_ram() {
  MemoryBacking b{cpu_alloc, cpu_free, true};
  b.release_before_growing = true;
  b.split_large_blocks = true;
  return b;
}

class CpuRuntime final : public DeviceRuntime {
 public:
  MemoryBacking device_backing() override { return device_backing_of_ram(); }
  // "Device" and host are the same RAM here: pinned host memory is ordinary memory.
  MemoryBacking host_backing(HostMemory) override { return {cpu_alloc, cpu_free, true}; }
  std::unique_ptr<detail::StreamImpl> make_stream(const std::string& name, bool compute) override {
    return cpu::make_stream(name, compute);
  }
  void select(int) override {}  // one device of this type
};

[[gnu::init_priority(kRegisterBackends)]] const RegisterRuntime<CpuRuntime> registered(DeviceType::cpu);

}  // namespace

}  // namespace tidal::cpu
