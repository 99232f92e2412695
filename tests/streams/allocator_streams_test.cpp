// The caching allocator's cross-stream reuse (allocator_streams.h, Note [Cross-stream reuse]) on fake
// streams and events that record what the allocator asked of them: same-stream reuse waits on
// nothing, cross-stream reuse waits on the free's event, and the accounting is that of an allocator
// that tracks no stream.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "tidal/allocator.h"
#include "tidal/seam/runtime.h"
#include "tidal/stream.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

void* sys_alloc(int64_t n) { return std::malloc(size_t(n)); }
void sys_free(void* p, int64_t) { std::free(p); }
constexpr MemoryBacking kBacking{sys_alloc, sys_free, true, true};
constexpr MemoryCategory kTemp = MemoryCategory::temporary;

struct FakeEvent final : detail::EventState {
  void wait() override {}
  bool done() override { return true; }
  int64_t time_ns() override { return 0; }
  std::exception_ptr error() override { return nullptr; }
};

// Counts the records and keeps the events waited for; runs nothing.
class FakeStream final : public detail::StreamImpl {
 public:
  explicit FakeStream(bool compute) : compute_(compute) {}
  bool is_compute() const override { return compute_; }
  void enqueue(std::function<void()> task, const char*) override { task(); }
  void wait(const std::shared_ptr<detail::EventState>& e) override { waited.push_back(e); }
  std::shared_ptr<detail::EventState> record() override {
    recorded.push_back(std::make_shared<FakeEvent>());
    return recorded.back();
  }
  void synchronize() override {}
  bool query() override { return true; }
  void copy_bytes(void*, const void*, int64_t, const char*, std::shared_ptr<const void>) override {}
  int64_t busy_ns() const override { return 0; }

  std::vector<std::shared_ptr<detail::EventState>> recorded, waited;

 private:
  bool compute_;
};

FakeStream* g_current = nullptr;
detail::StreamImpl* fake_current(Device) { return g_current; }

struct Streams : ::testing::Test {
  FakeStream compute{true}, side{false};
  Allocator a{"fake", Device::cpu(), kBacking, fake_current};
  void on(FakeStream& s) { g_current = &s; }
  void TearDown() override { g_current = nullptr; }
};

TEST_F(Streams, SameStreamReuseWaitsOnNothing) {
  on(compute);
  void* p = a.allocate(4096, kTemp);
  a.deallocate(p, 4096, kTemp);
  EXPECT_EQ(a.allocate(4000, kTemp), p);
  EXPECT_TRUE(compute.recorded.empty());
  EXPECT_TRUE(compute.waited.empty());
  a.deallocate(p, 4000, kTemp);
  // A side stream's free records its event (the stream may be gone at a reuse elsewhere), but its own
  // reuse waits for nothing.
  on(side);
  void* q = a.allocate(1 << 20, kTemp);
  a.deallocate(q, 1 << 20, kTemp);
  EXPECT_EQ(side.recorded.size(), 1u);
  EXPECT_EQ(a.allocate(1 << 20, kTemp), q);
  EXPECT_TRUE(side.waited.empty());
  EXPECT_EQ(side.recorded.size(), 1u);
  EXPECT_EQ(a.cross_stream_reuses(), 0);
  a.deallocate(q, 1 << 20, kTemp);
}

TEST_F(Streams, BlockFreedOnComputeWaitsOnAnEventRecordedAtTheReuse) {
  on(compute);
  void* p = a.allocate(4096, kTemp);
  a.deallocate(p, 4096, kTemp);
  EXPECT_TRUE(compute.recorded.empty());  // the free cost nothing
  on(side);
  EXPECT_EQ(a.allocate(4096, kTemp), p);
  ASSERT_EQ(compute.recorded.size(), 1u);
  ASSERT_EQ(side.waited.size(), 1u);
  EXPECT_EQ(side.waited[0], compute.recorded[0]);
  EXPECT_EQ(a.cross_stream_reuses(), 1);
  a.deallocate(p, 4096, kTemp);
}

TEST_F(Streams, BlockFreedOnASideStreamWaitsOnTheFreesEvent) {
  on(side);
  void* p = a.allocate(4096, kTemp);
  a.deallocate(p, 4096, kTemp);
  ASSERT_EQ(side.recorded.size(), 1u);
  on(compute);
  EXPECT_EQ(a.allocate(4096, kTemp), p);
  ASSERT_EQ(compute.waited.size(), 1u);
  EXPECT_EQ(compute.waited[0], side.recorded[0]);
  EXPECT_EQ(side.recorded.size(), 1u);  // nothing recorded at the reuse
  EXPECT_TRUE(compute.recorded.empty());
  // Reused once, the block is the compute stream's: its next reuse there waits for nothing.
  a.deallocate(p, 4096, kTemp);
  EXPECT_EQ(a.allocate(4096, kTemp), p);
  EXPECT_EQ(compute.waited.size(), 1u);
  a.deallocate(p, 4096, kTemp);
}

TEST_F(Streams, PrefersABlockFreedOnTheRequestingStream) {
  on(side);
  void* s = a.allocate(8192, kTemp);
  on(compute);
  void* c = a.allocate(8192, kTemp);
  on(side);
  a.deallocate(s, 8192, kTemp);  // first in the cache: a stream-blind allocator would take it first
  on(compute);
  a.deallocate(c, 8192, kTemp);
  EXPECT_EQ(a.allocate(8192, kTemp), c);
  EXPECT_TRUE(compute.waited.empty());
  EXPECT_EQ(a.allocate(8192, kTemp), s);  // the only one left: behind the side stream's event
  ASSERT_EQ(compute.waited.size(), 1u);
  EXPECT_EQ(compute.waited[0], side.recorded.back());
  EXPECT_EQ(a.cross_stream_reuses(), 1);
  a.deallocate(s, 8192, kTemp);
  a.deallocate(c, 8192, kTemp);
}

TEST_F(Streams, RecordStreamMakesEvenTheFreeingStreamWait) {
  on(compute);
  void* p = a.allocate(4096, kTemp);
  a.record_stream(p, side);  // e.g. a copy on the side stream reads it
  ASSERT_EQ(side.recorded.size(), 1u);
  a.deallocate(p, 4096, kTemp);
  EXPECT_EQ(a.allocate(4096, kTemp), p);
  ASSERT_EQ(compute.waited.size(), 1u);
  EXPECT_EQ(compute.waited[0], side.recorded[0]);
  a.deallocate(p, 4096, kTemp);
  EXPECT_EQ(a.allocate(4096, kTemp), p);  // the event was for that use only
  EXPECT_EQ(compute.waited.size(), 1u);
  a.deallocate(p, 4096, kTemp);
  EXPECT_THROW(a.record_stream(p, side), Error);  // freed bytes: a bug in the caller
}

TEST_F(Streams, ReleasedBlocksCarryNoEvents) {
  on(side);
  void* p = a.allocate(4096, kTemp);
  a.deallocate(p, 4096, kTemp);
  a.empty_cache();  // the device's own free waits for queued work
  on(compute);
  a.deallocate(a.allocate(4096, kTemp), 4096, kTemp);
  EXPECT_TRUE(compute.waited.empty());
  EXPECT_EQ(a.cross_stream_reuses(), 0);
}

TEST_F(Streams, PoolsAreRefusedWhereStreamsAreTracked) {
  try {
    a.reserve_pool(1 << 20);
    FAIL() << "a stream-ordered allocator took a pool";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pools are for memory no stream tracks"), std::string::npos) << e.what();
  }
}

// The same requests and frees, spread over two streams, on an allocator that tracks them and on one
// that does not: every number the stats report is the same (only which block a request gets may differ).
TEST_F(Streams, AccountingIsThatOfAnAllocatorWithoutStreams) {
  Allocator plain("plain", Device::cpu(), {sys_alloc, sys_free, true});
  a.set_event_log(true);
  plain.set_event_log(true);
  const int64_t sizes[] = {1000, 70000, 3 << 20, 512, 70000, 1000, 3 << 20, 2 << 20};
  struct Live {
    void* tracked;
    void* plain;
    int64_t n;
    MemoryCategory c;
  };
  std::vector<Live> live;
  auto free_one = [&](size_t k) {
    a.deallocate(live[k].tracked, live[k].n, live[k].c);
    plain.deallocate(live[k].plain, live[k].n, live[k].c);
    live[k].tracked = nullptr;
  };
  for (int round = 0; round < 3; ++round)
    for (size_t i = 0; i < std::size(sizes); ++i) {
      on(i % 2 ? side : compute);
      const MemoryCategory c = MemoryCategory(i % 6);
      live.push_back({a.allocate(sizes[i], c), plain.allocate(sizes[i], c), sizes[i], c});
      if (live.size() >= 3) free_one(live.size() - 3);  // each lives while the next two are made
    }
  EXPECT_GT(a.cross_stream_reuses(), 0);
  const MemoryStats s = a.stats(), t = plain.stats();
  EXPECT_EQ(s.allocated, t.allocated);
  EXPECT_EQ(s.peak_allocated, t.peak_allocated);
  EXPECT_EQ(s.reserved, t.reserved);
  EXPECT_EQ(s.peak_reserved, t.peak_reserved);
  EXPECT_EQ(s.cache_hits, t.cache_hits);
  EXPECT_EQ(s.system_allocs, t.system_allocs);
  EXPECT_EQ(s.at_peak, t.at_peak);
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    EXPECT_EQ(s.category[size_t(c)].allocated, t.category[size_t(c)].allocated) << c;
    EXPECT_EQ(s.category[size_t(c)].peak, t.category[size_t(c)].peak) << c;
    EXPECT_EQ(s.category[size_t(c)].peak_blocks, t.category[size_t(c)].peak_blocks) << c;
  }
  const std::vector<MemoryEvent> ea = a.events(), ep = plain.events();
  ASSERT_EQ(ea.size(), ep.size());
  for (size_t i = 0; i < ea.size(); ++i) {
    EXPECT_EQ(ea[i].delta, ep[i].delta) << i;
    EXPECT_EQ(ea[i].allocated, ep[i].allocated) << i;
    EXPECT_EQ(ea[i].reserved, ep[i].reserved) << i;
  }
  for (size_t k = 0; k < live.size(); ++k)
    if (live[k].tracked != nullptr) free_one(k);
  EXPECT_EQ(a.stats().reserved, plain.stats().reserved);
}

// Without a stream source (the CPU, meta, host memory) nothing is recorded or waited for.
TEST(AllocatorStreams, AnAllocatorWithoutStreamsAsksNothingOfThem) {
  Allocator plain("plain", Device::cpu(), {sys_alloc, sys_free, true});
  FakeStream side(false);
  void* p = plain.allocate(4096, kTemp);
  plain.record_stream(p, side);
  plain.deallocate(p, 4096, kTemp);
  EXPECT_TRUE(side.recorded.empty());
  EXPECT_EQ(plain.cross_stream_reuses(), 0);
  // The CPU backend's allocators track no stream: a record is a no-op, the block's reuse as before.
  Tensor t = empty({256}, DType::f32, Device::cpu());
  Stream worker("record_stream test");
  record_stream(t, worker);
  EXPECT_EQ(device_allocator(Device::cpu()).cross_stream_reuses(), 0);
}

}  // namespace
}  // namespace tidal
