#pragma once
// A region a caching allocator took from the system at once (Allocator::reserve_pool) and carves its
// blocks from: one system allocation instead of one per block, which matters where each allocation is
// slow (pinned host memory: cudaHostAlloc locks every page). First fit by address; a block given back
// merges with its free neighbours.
#include <cstdint>
#include <map>

namespace tidal {

class BlockPool {
 public:
  BlockPool(void* base, int64_t bytes);

  // A block of `bytes` carved from the pool, or nullptr when no free range holds it.
  void* take(int64_t bytes);
  // Gives back a block `take` returned.
  void give(void* ptr, int64_t bytes);
  bool owns(const void* ptr) const;
  bool all_free() const { return free_bytes_ == bytes_; }

  void* base() const { return base_; }
  int64_t bytes() const { return bytes_; }
  int64_t free_bytes() const { return free_bytes_; }

 private:
  char* base_;
  int64_t bytes_;
  int64_t free_bytes_;
  std::map<int64_t, int64_t> free_;  // offset -> length of each free range, none adjacent
};

}  // namespace tidal
