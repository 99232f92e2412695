// The meta device's DeviceRuntime: fake addresses (accounted, never touched) for its device memory
// and for its host side (a dry run's offload and swap-optimizer states: allocator.h host_allocator),
// and streams that run their work in order on the calling thread (nothing to overlap: no threads), whose
// byte copies move nothing — a copy between meta device and meta host memory is ordered like a real
// one and holds what it keeps alive until its turn, but has no bytes to move. Its kernels
// (cost_kernels.cpp) run only while a cost sink is installed (seam/kernels.h kernels_for).
#include <atomic>

#include "tidal/backend/cpu/stream.h"
#include "tidal/seam/registry.h"

namespace tidal::meta {
namespace {

// Meta blocks get distinct fake addresses so the cache can key them; nothing ever reads them.
std::atomic<uintptr_t> g_next{uintptr_t(1) << 40};
void* meta_alloc(int64_t bytes) { return reinterpret_cast<void*>(g_next.fetch_add(uintptr_t((bytes + 63) / 64 * 64))); }
void meta_free(void*, int64_t) {}

// A stream of the meta device: the cpu's inline stream (its work runs in order on the calling thread:
// a meta step has nothing to overlap, so side streams start no thread and a dry run is deterministic),
// whose copies are empty tasks: the same order, events and lifetimes, no bytes moved.
class MetaStream final : public detail::StreamImpl {
 public:
  MetaStream(const std::string& name, bool compute) : inner_(cpu::make_stream(name, true)), compute_(compute) {}
  bool is_compute() const override { return compute_; }
  void enqueue(std::function<void()> task, const char* label) override { inner_->enqueue(std::move(task), label); }
  void wait(const std::shared_ptr<detail::EventState>& event) override { inner_->wait(event); }
  std::shared_ptr<detail::EventState> record() override { return inner_->record(); }
  void synchronize() override { inner_->synchronize(); }
  bool query() override { return inner_->query(); }
  void copy_bytes(void*, const void*, int64_t, const char* label, std::shared_ptr<const void> keep_alive) override {
    inner_->enqueue([keep = std::move(keep_alive)] {}, label);
  }
  int64_t busy_ns() const override { return inner_->busy_ns(); }

 private:
  std::unique_ptr<detail::StreamImpl> inner_;
  bool compute_;
};

class MetaRuntime final : public DeviceRuntime {
 public:
  MemoryBacking device_backing() override { return {meta_alloc, meta_free, false}; }
  MemoryBacking host_backing(HostMemory) override { return {meta_alloc, meta_free, false}; }
  std::unique_ptr<detail::StreamImpl> make_stream(const std::string& name, bool compute) override {
    return std::make_unique<MetaStream>(name, compute);
  }
  void select(int) override {}  // one device of this type
};

[[gnu::init_priority(kRegisterBackends)]] const RegisterRuntime<MetaRuntime> registered(DeviceType::meta);

}  // namespace

}  // namespace tidal::meta
