#include "tidal/backend/meta/runtime.h"

#include <atomic>

#include "tidal/backend/cpu/stream.h"

namespace tidal::meta {
namespace {

// Meta blocks get distinct fake addresses so the cache can key them; nothing ever reads them.
std::atomic<uintptr_t> g_next{uintptr_t(1) << 40};
void* meta_alloc(int64_t bytes) { return reinterpret_cast<void*>(g_next.fetch_add(uintptr_t((bytes + 63) / 64 * 64))); }
void meta_free(void*, int64_t) {}

class MetaRuntime final : public DeviceRuntime {
 public:
  Allocator::Backing device_backing() override { return {meta_alloc, meta_free, false}; }
  Allocator::Backing host_backing(HostMemory) override { return {meta_alloc, meta_free, false}; }
  std::unique_ptr<detail::StreamImpl> make_stream(const std::string& name, bool compute) override {
    return cpu::make_stream(name, compute);
  }
};

}  // namespace

DeviceRuntime& runtime() {
  static MetaRuntime r;
  return r;
}

}  // namespace tidal::meta
