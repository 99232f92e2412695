#pragma once
// What an allocator reports: bytes by category, peaks, the breakdown at the peak, and an optional
// event log of every allocation and free.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tidal {

enum class MemoryCategory : uint8_t {
  parameter,
  gradient,
  optimizer_state,
  activation,  // saved for backward (autograd marks these while they are saved)
  logits,
  temporary,  // everything else: op outputs not (yet) saved, workspaces
  host_offload,
};
inline constexpr int kNumMemoryCategories = 7;
std::string_view category_name(MemoryCategory c);

struct CategoryStats {
  int64_t allocated = 0;  // bytes requested by live allocations
  int64_t peak = 0;       // highest `allocated` of this category alone
  int64_t blocks = 0;     // bytes of the cache blocks those allocations occupy (>= allocated)
  int64_t peak_blocks = 0;
  int64_t count = 0;  // live allocations
  int64_t total_count = 0;
};

struct MemoryStats {
  int64_t allocated = 0;  // bytes requested by live allocations, all categories
  int64_t peak_allocated = 0;
  int64_t reserved = 0;  // bytes held from the system: blocks in use plus cached free blocks
  int64_t peak_reserved = 0;
  int64_t num_allocs = 0;  // live allocations
  int64_t total_allocs = 0;
  int64_t cache_hits = 0;     // allocations served from a cached block
  int64_t system_allocs = 0;  // allocations that had to ask the system
  int64_t system_frees = 0;
  int64_t pool_reserved = 0;  // of `reserved`: pools taken at once (Allocator::reserve_pool), carved into blocks
  int64_t pool_allocs = 0;    // allocations that carved a new block from a pool instead of asking the system
  int64_t num_ooms = 0;
  int64_t limit = 0;  // capacity limit in bytes; 0 = none
  std::array<CategoryStats, kNumMemoryCategories> category{};
  // Allocated bytes per category at the moment `peak_allocated` was reached.
  std::array<int64_t, kNumMemoryCategories> at_peak{};

  const CategoryStats& operator[](MemoryCategory c) const { return category[size_t(c)]; }
  // PyTorch's "reserved but unallocated": the cache's free blocks plus the rounding of blocks in use. Not
  // fragmentation, which would compare the largest free block with this total (not measured).
  int64_t reserved_unallocated() const { return reserved - allocated; }
};

// What a MemoryEvent records. A change of category is two events on the same block: out of the old
// category (-bytes), then into the new one (+bytes); the totals of both are those after the change.
enum class MemoryEventKind : uint8_t { allocate, free, recategorize_from, recategorize_to, failed };

// One allocation (+bytes) or free (-bytes), with where it happened.
struct MemoryEvent {
  int64_t time_ns = 0;
  int64_t delta = 0;
  MemoryCategory category = MemoryCategory::temporary;
  const char* op = nullptr;  // static string or nullptr
  int layer = -1;
  int64_t allocated = 0;  // totals after the event
  int64_t reserved = 0;
  int64_t category_allocated = 0;  // this category's allocated bytes after the event
  const void* block = nullptr;     // the block's address: pairs an allocation with its free
  const char* module = nullptr;    // dotted module name (owned by the module: read it while the model lives)
  MemoryEventKind kind = MemoryEventKind::allocate;  // failed: a request that ran out of memory (delta is
                                                     // the request; the totals did not change)
};

// "1.50 GiB", "312.0 KiB", "17 B".
std::string format_bytes(int64_t bytes);
// Parses "8GiB", "512 MiB", "1.5GB", "4096"; throws tidal::Error on anything else.
int64_t parse_bytes(std::string_view text);
// Multi-line table: one row per category with current, peak and at-peak bytes.
std::string format_breakdown(const MemoryStats& s);

}  // namespace tidal
