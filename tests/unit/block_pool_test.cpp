// Pools of the caching allocator (block_pool.h, Allocator::reserve_pool): blocks carved from one
// system allocation, and pinned host memory pooled after a run's first step.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "tidal/allocator.h"
#include "tidal/block_pool.h"

namespace tidal {
namespace {

int g_system_allocs = 0;
void* sys_alloc(int64_t n) {
  ++g_system_allocs;
  return std::malloc(size_t(n));
}
void sys_free(void* p, int64_t) { std::free(p); }
constexpr MemoryCategory kHost = MemoryCategory::host_offload;

TEST(BlockPool, CarvesFirstFitAndMergesWhatComesBack) {
  std::vector<char> region(4096);
  BlockPool pool(region.data(), 4096);
  char* a = static_cast<char*>(pool.take(1024));
  char* b = static_cast<char*>(pool.take(1024));
  char* c = static_cast<char*>(pool.take(1024));
  EXPECT_EQ(a, region.data());
  EXPECT_EQ(b, a + 1024);
  EXPECT_EQ(c, b + 1024);
  EXPECT_EQ(pool.take(2048), nullptr);  // 1024 left
  EXPECT_EQ(pool.free_bytes(), 1024);
  pool.give(b, 1024);
  EXPECT_EQ(pool.take(2048), nullptr);  // two ranges of 1024, not adjacent
  pool.give(a, 1024);                   // merges with b's range: 2048 at the start
  EXPECT_EQ(pool.take(2048), a);
  pool.give(a, 2048);
  pool.give(c, 1024);  // merges both sides: the whole region again
  EXPECT_TRUE(pool.all_free());
  EXPECT_EQ(pool.take(4096), a);
  EXPECT_TRUE(pool.owns(a + 4095));
  EXPECT_FALSE(pool.owns(a + 4096));
  pool.give(a, 4096);
  EXPECT_THROW(pool.give(a, 1024), Error);  // given back twice
}

TEST(AllocatorPool, BlocksAreCarvedFromTheReservationNotTheSystem) {
  Allocator a("host", Device::cpu(), {sys_alloc, sys_free, true});
  void* p = a.allocate(100000, kHost);  // a block of 100352 bytes (196 x 512)
  void* q = a.allocate(5000, kHost);
  a.deallocate(q, 5000, kHost);  // cached: goes back to the system when the pool is taken
  MemoryStats s = a.stats();
  ASSERT_EQ(s.reserved, 100352 + 5120);
  a.reserve_pool(1 << 20);
  s = a.stats();
  EXPECT_EQ(s.pool_reserved, 1 << 20);
  EXPECT_EQ(s.reserved, 100352 + (1 << 20));
  EXPECT_EQ(s.system_frees, 1);
  EXPECT_EQ(s.system_allocs, 3);
  // Carved: no system allocation, the reservation unchanged, the requests accounted as before.
  void* x = a.allocate(300000, kHost);  // 300032-byte block
  void* y = a.allocate(700000, kHost);  // 700416: 48128 bytes of the pool left
  s = a.stats();
  EXPECT_EQ(s.system_allocs, 3);
  EXPECT_EQ(s.pool_allocs, 2);
  EXPECT_EQ(s.reserved, 100352 + (1 << 20));
  EXPECT_EQ(s.allocated, 100000 + 300000 + 700000);
  EXPECT_EQ(static_cast<char*>(y), static_cast<char*>(x) + 300032);
  // Too big for what is left of the pool: the next block comes from the system.
  void* z = a.allocate(60000, kHost);
  EXPECT_EQ(a.stats().system_allocs, 4);
  // Freed blocks are cached as usual; empty_cache gives the pool's back to the pool, not the system.
  a.deallocate(x, 300000, kHost);
  a.deallocate(y, 700000, kHost);
  a.deallocate(z, 60000, kHost);
  a.empty_cache();
  s = a.stats();
  EXPECT_EQ(s.reserved, 100352 + (1 << 20));  // z's block went back to the system
  EXPECT_EQ(s.system_frees, 2);
  EXPECT_EQ(a.allocate(1 << 20, kHost), x);  // the whole pool, merged again
  EXPECT_EQ(a.stats().system_allocs, 4);
  a.deallocate(x, 1 << 20, kHost);
  a.deallocate(p, 100000, kHost);
}

TEST(AllocatorPool, AReservationPastTheLimitIsOutOfMemory) {
  Allocator a("host", Device::cpu(), {sys_alloc, sys_free, true});
  a.set_limit(1 << 20);
  try {
    a.reserve_pool(2 << 20);
    FAIL() << "a pool past the limit was reserved";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reserve a pool of 2.00 MiB on host"), std::string::npos) << e.what();
    EXPECT_EQ(e.requested(), 2 << 20);
  }
  EXPECT_EQ(a.stats().reserved, 0);
  EXPECT_EQ(a.stats().num_ooms, 1);
  EXPECT_THROW(a.reserve_pool(0), Error);
}

// One "step" of an offload-like pattern: host buffers taken in order, all freed at the end.
void offload_step(Allocator& a) {
  const int64_t sizes[] = {3 << 20, 100000, 3 << 20, 70000, 1 << 20, 100000};
  std::vector<void*> held;
  for (int64_t n : sizes) held.push_back(a.allocate(n, kHost));
  for (size_t i = 0; i < held.size(); ++i) a.deallocate(held[i], sizes[i], kHost);
}

// The trainer's call after the first step (trainer.cpp): where the backing asks for it (pinned
// memory), the cached blocks become one pool that the next step carves exactly; elsewhere (the CPU
// backend's host memory) nothing changes.
TEST(AllocatorPool, PinnedMemoryIsPooledAfterTheFirstStep) {
  MemoryBacking pinned{sys_alloc, sys_free, true};
  pinned.pool_after_first_step = true;
  Allocator a("pinned", Device::cpu(), pinned);
  void* kept = a.allocate(4096, kHost);  // lives across steps (a swapped optimizer state): not pooled
  offload_step(a);
  const MemoryStats first = a.stats();
  const int64_t cached = first.reserved - 4096;
  EXPECT_EQ(first.system_allocs, 7);
  EXPECT_EQ(a.pool_cached_blocks(), cached);
  EXPECT_EQ(a.pool_cached_blocks(), 0);  // once
  g_system_allocs = 0;
  for (int step = 0; step < 3; ++step) offload_step(a);
  const MemoryStats later = a.stats();
  EXPECT_EQ(g_system_allocs, 0);  // no step after the first asked the system
  EXPECT_EQ(later.pool_reserved, cached);
  EXPECT_EQ(later.pool_allocs, 6);  // the second step carved every block; the others reused them
  EXPECT_EQ(later.reserved, first.reserved);
  EXPECT_EQ(later.peak_allocated, first.peak_allocated);
  a.deallocate(kept, 4096, kHost);

  // The CPU's host memory: no pool, the numbers of an allocator that never heard of pools.
  Allocator plain("host", Device::cpu(), {sys_alloc, sys_free, true});
  offload_step(plain);
  const MemoryStats before = plain.stats();
  EXPECT_EQ(plain.pool_cached_blocks(), 0);
  offload_step(plain);
  const MemoryStats after = plain.stats();
  EXPECT_EQ(after.pool_reserved, 0);
  EXPECT_EQ(after.reserved, before.reserved);
  EXPECT_EQ(after.system_allocs, before.system_allocs);
  EXPECT_EQ(host_allocator(Device::cpu()).pool_cached_blocks(), 0);
}

}  // namespace
}  // namespace tidal
