#include <gtest/gtest.h>

#include "tidal/allocator.h"
#include "tidal/memory_scope.h"
#include "tidal/seam/runtime.h"
#include "tidal/storage.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

// A private allocator so the numbers are exact regardless of other tests.
void* sys_alloc(int64_t n) { return std::malloc(size_t(n)); }
void sys_free(void* p, int64_t) { std::free(p); }
Allocator make_test_allocator() { return Allocator("test", Device::cpu(), {sys_alloc, sys_free, true}); }

}  // namespace

TEST(Allocator, AccountsPerCategoryWithPeaks) {
  Allocator a("test", Device::cpu(), {sys_alloc, sys_free, true});
  void* p1 = a.allocate(1000, MemoryCategory::parameter);
  void* p2 = a.allocate(3000, MemoryCategory::activation);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.allocated, 4000);
  EXPECT_EQ(s[MemoryCategory::parameter].allocated, 1000);
  EXPECT_EQ(s[MemoryCategory::activation].allocated, 3000);
  EXPECT_EQ(s.num_allocs, 2);
  EXPECT_EQ(s.reserved, 1024 + 3072);  // blocks round up to 512 bytes
  EXPECT_EQ(s.reserved_unallocated(), 96);
  a.deallocate(p2, 3000, MemoryCategory::activation);
  s = a.stats();
  EXPECT_EQ(s.allocated, 1000);
  EXPECT_EQ(s.peak_allocated, 4000);
  EXPECT_EQ(s.at_peak[size_t(MemoryCategory::activation)], 3000);
  EXPECT_EQ(s[MemoryCategory::activation].peak, 3000);
  EXPECT_EQ(s[MemoryCategory::activation].blocks, 0);
  EXPECT_EQ(s[MemoryCategory::activation].peak_blocks, 3072);
  EXPECT_EQ(s.reserved, 1024 + 3072);  // the freed block stays cached
  // A request of the same size reuses the cached block: no new system allocation.
  const int64_t sys = s.system_allocs;
  void* p3 = a.allocate(2900, MemoryCategory::temporary);
  EXPECT_EQ(p3, p2);
  EXPECT_EQ(a.stats().system_allocs, sys);
  EXPECT_EQ(a.stats().cache_hits, 1);
  a.recategorize(p3, 2900, MemoryCategory::temporary, MemoryCategory::activation);
  EXPECT_EQ(a.stats()[MemoryCategory::activation].allocated, 2900);
  EXPECT_EQ(a.stats()[MemoryCategory::temporary].allocated, 0);
  a.deallocate(p3, 2900, MemoryCategory::activation);
  a.deallocate(p1, 1000, MemoryCategory::parameter);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 0);
  a.reset_peak_stats();
  EXPECT_EQ(a.stats().peak_allocated, 0);
}

TEST(Allocator, ReusesTheSmallestFittingBlockFirstFreedFirst) {
  Allocator a = make_test_allocator();
  const MemoryCategory c = MemoryCategory::temporary;
  for (int round = 0; round < 2; ++round) {  // the second round runs on the map nodes of the first
    void* big = a.allocate(8192, c);
    void* x = a.allocate(4096, c);
    void* y = a.allocate(4096, c);
    void* z = a.allocate(4096, c);
    a.deallocate(big, 8192, c);
    a.deallocate(y, 4096, c);
    a.deallocate(x, 4096, c);
    a.deallocate(z, 4096, c);
    // 4000 bytes take a 4096-byte block before the 8192-byte one, the one freed first first.
    EXPECT_EQ(a.allocate(4000, c), y);
    EXPECT_EQ(a.allocate(4000, c), x);
    EXPECT_EQ(a.allocate(4000, c), z);
    EXPECT_EQ(a.allocate(7500, c), big);  // 7680 bytes: 8192 wastes less than 1/8 + 512
    a.deallocate(x, 4000, c);
    a.deallocate(y, 4000, c);
    a.deallocate(z, 4000, c);
    a.deallocate(big, 7500, c);
  }
  EXPECT_EQ(a.stats().system_allocs, 4);
  EXPECT_EQ(a.stats().cache_hits, 12);
}

// Note [Release before growing]: with the backing's policy, a request no cached block fits, which would take the
// reserve more than 1/16 above its live blocks' peak, gives back the fewest cached blocks that keep it there;
// without it, the cache stays beside the new block.
TEST(Allocator, ReleasesItsCacheBeforeGrowingWhereTheBackingSaysSo) {
  constexpr int64_t MiB = int64_t(1) << 20;
  for (const bool release : {false, true}) {
    MemoryBacking backing{sys_alloc, sys_free, true};
    backing.release_before_growing = release;
    Allocator a("test", Device::cpu(), backing);
    const MemoryCategory c = MemoryCategory::temporary;
    void* x = a.allocate(8 * MiB, c);
    void* y = a.allocate(2 * MiB, c);
    void* z = a.allocate(MiB, c);
    void* w = a.allocate(MiB, c);  // live blocks' peak: 12 MiB
    a.deallocate(x, 8 * MiB, c);
    a.deallocate(y, 2 * MiB, c);
    a.deallocate(z, MiB, c);
    // 4 MiB fits none of the cached 8, 2 and 1 MiB blocks; growing would reserve 16 MiB, 3.25 MiB above 12 + 3/4:
    // the smallest block holding 3.25 MiB (the 8 MiB one) goes back, the others stay.
    void* big = a.allocate(4 * MiB, c);
    EXPECT_EQ(a.stats().reserved, release ? 8 * MiB : 16 * MiB) << release;
    EXPECT_EQ(a.stats().system_frees, release ? 1 : 0) << release;
    void* mid = a.allocate(2 * MiB, c);  // the cached 2 MiB block either way
    EXPECT_EQ(mid, y);
    void* half = a.allocate(MiB / 2, c);  // fits no cached block; within 1/16 of the peak: the reserve grows
    EXPECT_EQ(a.stats().reserved, release ? 8 * MiB + MiB / 2 : 16 * MiB + MiB / 2) << release;
    EXPECT_EQ(a.stats().system_frees, release ? 1 : 0) << release;
    for (auto [p, n] : {std::pair{w, MiB}, {big, 4 * MiB}, {mid, 2 * MiB}, {half, MiB / 2}}) a.deallocate(p, n, c);
    a.empty_cache();
    EXPECT_EQ(a.stats().reserved, 0);
  }
}

// Note [Splitting large blocks]: where the backing says so, a cached block above 1 MiB serves a smaller large
// request at its start, the rest cached on its own; blocks freed beside free ones of their segment merge, and only
// a segment that is one free block again goes back to the system.
TEST(Allocator, SplitsLargeCachedBlocksAndMergesThemWhenFreed) {
  constexpr int64_t MiB = int64_t(1) << 20;
  MemoryBacking backing{sys_alloc, sys_free, true};
  backing.split_large_blocks = true;
  Allocator a("test", Device::cpu(), backing);
  const MemoryCategory c = MemoryCategory::activation;
  char* x = static_cast<char*>(a.allocate(64 * MiB, c));
  a.deallocate(x, 64 * MiB, c);
  void* p = a.allocate(16 * MiB, c);  // the cached 64 MiB block, split
  void* q = a.allocate(16 * MiB - 1000, c);
  EXPECT_EQ(p, x);
  EXPECT_EQ(q, x + 16 * MiB);
  EXPECT_EQ(a.stats().reserved, 64 * MiB);
  EXPECT_EQ(a.stats()[c].blocks, 32 * MiB);  // each holds its own bytes (64 KiB rounding), not the segment's
  EXPECT_EQ(a.stats().cache_hits, 2);
  void* r = a.allocate(40 * MiB, c);  // the 32 MiB left do not hold it: a new segment
  EXPECT_EQ(a.stats().reserved, 104 * MiB);
  EXPECT_EQ(a.stats().system_allocs, 2);
  // A segment partly live stays, its free part cached; a whole free one goes back.
  a.deallocate(r, 40 * MiB, c);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 64 * MiB);
  EXPECT_EQ(a.stats().system_frees, 1);
  // Freed, p and q merge with the free rest: one 64 MiB block, which a request within 1 MiB of it takes whole.
  a.deallocate(q, 16 * MiB - 1000, c);
  a.deallocate(p, 16 * MiB, c);
  void* whole = a.allocate(63 * MiB + 1, c);
  EXPECT_EQ(whole, x);
  EXPECT_EQ(a.stats()[c].blocks, 64 * MiB);
  a.deallocate(whole, 63 * MiB + 1, c);
  // Requests up to 1 MiB never split a large block.
  void* small = a.allocate(MiB / 2, c);
  EXPECT_NE(small, x);
  EXPECT_EQ(a.stats().system_allocs, 3);
  a.deallocate(small, MiB / 2, c);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 0);
  EXPECT_EQ(a.stats().system_frees, 3);
}

// The CPU's device memory: large blocks are their own 2 MiB-aligned mappings (unmapped when freed), small ones
// 64-byte aligned from malloc; the allocator gives its cache back before growing (Note [Release before growing]).
TEST(Allocator, TheCpusDeviceMemoryAlignsLargeBlocksToHugePages) {
  const MemoryBacking backing = device_runtime(Device::cpu()).device_backing();
  EXPECT_TRUE(backing.release_before_growing);
  EXPECT_TRUE(backing.split_large_blocks);
  EXPECT_TRUE(backing.touches_memory);
  for (const int64_t bytes : {int64_t(100), int64_t(4) << 20, (int64_t(5) << 20) + 1, int64_t(64) << 20}) {
    auto* p = static_cast<unsigned char*>(backing.alloc(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (bytes >= (4 << 20) ? (2 << 20) : 64), 0u) << bytes;
    p[0] = 1;
    p[bytes - 1] = 2;  // every byte asked for is there
    EXPECT_EQ(p[0] + p[bytes - 1], 3);
    backing.free(p, bytes);
  }
}

TEST(Allocator, CapacityLimitThrowsOutOfMemoryWithBreakdown) {
  Allocator a = make_test_allocator();
  a.set_limit(1 << 20);
  void* p = a.allocate(600 << 10, MemoryCategory::parameter);
  try {
    OpScope op("matmul");
    LayerScope layer(3);
    a.allocate(600 << 10, MemoryCategory::activation);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tried to allocate 600.00 KiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1.00 MiB limit"), std::string::npos) << msg;
    EXPECT_NE(msg.find("op matmul"), std::string::npos) << msg;
    EXPECT_NE(msg.find("layer 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parameter"), std::string::npos) << msg;
    EXPECT_EQ(e.requested(), 600 << 10);
    EXPECT_EQ(e.stats()[MemoryCategory::parameter].allocated, 600 << 10);
  }
  EXPECT_EQ(a.stats().num_ooms, 1);
  EXPECT_EQ(a.stats().allocated, 600 << 10);  // the failed request left no trace
  // Cached blocks are released before giving up.
  a.deallocate(p, 600 << 10, MemoryCategory::parameter);
  void* small = a.allocate(100 << 10, MemoryCategory::temporary);
  void* big = a.allocate(800 << 10, MemoryCategory::temporary);  // needs the cache emptied
  EXPECT_NE(big, nullptr);
  a.deallocate(small, 100 << 10, MemoryCategory::temporary);
  a.deallocate(big, 800 << 10, MemoryCategory::temporary);
  EXPECT_THROW(a.set_limit(-1), Error);
}

TEST(Allocator, EventLogRecordsOpAndLayer) {
  Allocator a = make_test_allocator();
  a.set_event_log(true);
  void* p;
  {
    OpScope op("gelu");
    LayerScope layer(5);
    p = a.allocate(4096, MemoryCategory::activation);
  }
  a.deallocate(p, 4096, MemoryCategory::activation);
  std::vector<MemoryEvent> ev = a.events();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].delta, 4096);
  EXPECT_STREQ(ev[0].op, "gelu");
  EXPECT_EQ(ev[0].layer, 5);
  EXPECT_EQ(ev[0].allocated, 4096);
  EXPECT_EQ(ev[1].delta, -4096);
  EXPECT_EQ(ev[1].allocated, 0);
  EXPECT_LE(ev[0].time_ns, ev[1].time_ns);
}

TEST(Allocator, ParsesAndFormatsByteCounts) {
  EXPECT_EQ(parse_bytes("8GiB"), int64_t(8) << 30);
  EXPECT_EQ(parse_bytes("512 MiB"), int64_t(512) << 20);
  EXPECT_EQ(parse_bytes("1.5GB"), int64_t(1500000000));
  EXPECT_EQ(parse_bytes("4096"), 4096);
  EXPECT_EQ(parse_bytes("2k"), 2048);
  EXPECT_THROW(parse_bytes("lots"), Error);
  EXPECT_THROW(parse_bytes("8 parsecs"), Error);
  EXPECT_THROW(parse_bytes("-1GiB"), Error);
  // 2^63 bytes and above do not wrap negative: refused by name (was "--memory must be positive, got ...").
  EXPECT_EQ(parse_bytes("4194304TiB"), int64_t(1) << 62);
  for (const char* huge : {"9223372036854775808", "8388608TiB", "1e300"}) {
    try {
      parse_bytes(huge);
      ADD_FAILURE() << huge << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is too many bytes"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(int64_t(3) << 29), "1.50 GiB");
}

TEST(Storage, ReleasesAndRematerializesInPlace) {
  Allocator& dev = device_allocator(Device::cpu());
  const int64_t before = dev.stats().allocated;
  Tensor t = full({256}, 3.0);
  Tensor view = t.narrow(0, 10, 5);
  std::shared_ptr<Storage> s = t.storage();
  EXPECT_EQ(dev.stats().allocated - before, 1024);
  s->release();
  EXPECT_FALSE(s->is_materialized());
  EXPECT_EQ(dev.stats().allocated, before);
  EXPECT_THROW(view.data<float>(), Error);  // a released storage cannot be read
  s->rematerialize();
  EXPECT_EQ(dev.stats().allocated - before, 1024);
  EXPECT_EQ(view.storage().get(), s.get());  // same identity: views stay valid
  view.fill_(7.0);
  EXPECT_EQ(t.to_vector<float>()[12], 7.0f);
}

TEST(Storage, SavedForBackwardCountsAsActivation) {
  Allocator& dev = device_allocator(Device::cpu());
  auto act = [&] { return dev.stats()[MemoryCategory::activation].allocated; };
  const int64_t base = act();
  Tensor t = full({100}, 1.0);
  EXPECT_EQ(t.storage()->category(), MemoryCategory::temporary);
  t.storage()->mark_saved();
  EXPECT_EQ(t.storage()->category(), MemoryCategory::activation);
  EXPECT_EQ(act() - base, 400);
  t.storage()->unmark_saved();
  EXPECT_EQ(act(), base);
  // Parameters stay parameters when saved.
  Tensor w;
  {
    MemoryScope scope(MemoryCategory::parameter);
    w = zeros({10});
  }
  w.storage()->mark_saved();
  EXPECT_EQ(w.storage()->category(), MemoryCategory::parameter);
  w.storage()->unmark_saved();
}

TEST(Storage, HostAndMetaAllocatorsAccountSeparately) {
  Allocator& host = host_allocator();
  Allocator& meta = device_allocator(Device::meta());
  const int64_t h0 = host.stats()[MemoryCategory::host_offload].allocated;
  const int64_t m0 = meta.stats().allocated;
  const int64_t c0 = device_allocator(Device::cpu()).stats().allocated;
  {
    Tensor h = empty_host({1000});
    Tensor m = empty({1 << 20}, DType::f32, Device::meta());
    EXPECT_EQ(host.stats()[MemoryCategory::host_offload].allocated - h0, 4000);
    EXPECT_EQ(meta.stats().allocated - m0, 4 << 20);
    EXPECT_EQ(device_allocator(Device::cpu()).stats().allocated, c0);
    EXPECT_TRUE(m.is_meta());
    EXPECT_THROW(m.data<float>(), Error);
  }
  EXPECT_EQ(host.stats()[MemoryCategory::host_offload].allocated, h0);
  EXPECT_EQ(meta.stats().allocated, m0);
}

TEST(Device, ParsesNames) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("meta"), Device::meta());
  EXPECT_THROW(Device::parse("gpu"), Error);
}

}  // namespace tidal
