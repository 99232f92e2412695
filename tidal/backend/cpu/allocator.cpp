// Backings of the cpu, meta and host allocators, and the process-wide allocator instances.
#include <sys/mman.h>

#include <atomic>
#include <cstdlib>

#include "tidal/allocator.h"

namespace tidal {
namespace {

constexpr int64_t kHugeThreshold = int64_t(4) << 20;
constexpr int64_t kHugePage = int64_t(2) << 20;

// Large blocks are 2 MiB aligned and advised as huge pages: fewer TLB misses, faster first touch.
void* cpu_alloc(int64_t bytes) {
  const bool huge = bytes >= kHugeThreshold;
  const int64_t align = huge ? kHugePage : 64;
  const int64_t size = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(size_t(align), size_t(size));
  if (p != nullptr && huge) madvise(p, size_t(size), MADV_HUGEPAGE);
  return p;
}

void cpu_free(void* ptr, int64_t) { std::free(ptr); }

// Meta blocks get distinct fake addresses so the cache can key them; nothing ever reads them.
std::atomic<uintptr_t> g_meta_next{uintptr_t(1) << 40};
void* meta_alloc(int64_t bytes) {
  return reinterpret_cast<void*>(g_meta_next.fetch_add(uintptr_t((bytes + 63) / 64 * 64)));
}
void meta_free(void*, int64_t) {}

Allocator& make_cpu_allocator() {
  static Allocator a("cpu", Device::cpu(), {cpu_alloc, cpu_free, true});
  if (const char* env = std::getenv("TIDAL_DEVICE_MEMORY"); env != nullptr && *env != '\0') {
    int64_t limit = 0;
    try {
      limit = parse_bytes(env);
    } catch (const Error& e) {
      throw Error(std::string("TIDAL_DEVICE_MEMORY: ") + e.what());
    }
    a.set_limit(limit);
  }
  return a;
}

}  // namespace

Allocator& device_allocator(Device device) {
  if (device.is_meta()) {
    static Allocator meta("meta", Device::meta(), {meta_alloc, meta_free, false});
    return meta;
  }
  static Allocator& cpu = make_cpu_allocator();
  return cpu;
}

Allocator& host_allocator() {
  static Allocator host("host", Device::cpu(), {cpu_alloc, cpu_free, true});
  return host;
}

}  // namespace tidal
