#pragma once
// The large blocks of a caching allocator that splits them (Allocator, Note [Splitting large blocks]): each
// system allocation is a segment, cut into blocks that lie end to end, live or free. A cached free block serves a
// smaller request by splitting (the request's bytes at its start, the rest a free block of its own); a block freed
// next to free ones of its segment merges with them, so a segment whose blocks are all free is one block again,
// which alone can go back to the system. Blocks of different segments never merge, even where the system placed
// the segments side by side.
#include <cstdint>
#include <map>

namespace tidal {

class BlockSegments {
 public:
  // A system allocation of `bytes` at `base`: one live block spanning it.
  void add(void* base, int64_t bytes);
  // Whether `ptr` starts a block of some segment (live or free).
  bool owns(const void* ptr) const { return blocks_.count(static_cast<const char*>(ptr)) == 1; }
  // Whether the block at `ptr` (owned) is free and spans its whole segment: it can go back to the system.
  bool whole_free_segment(const void* ptr) const;

  // The free block at `ptr` becomes live.
  void take(void* ptr);
  // The live block at `ptr` keeps its first `keep` bytes; the rest becomes a free block, whose address this
  // returns. 0 < keep < its size.
  void* split(void* ptr, int64_t keep);
  // The live block at `ptr` becomes free and merges with the free blocks next to it in its segment. The merged
  // block, and which neighbours it took in (their free-list entries are stale): (address, bytes) each.
  struct Freed {
    void* ptr;
    int64_t bytes;
    void* before = nullptr;  // a free block that ended where ptr's began (merged): its old address and size
    int64_t before_bytes = 0;
    void* after = nullptr;  // a free block that began where ptr's ended (merged)
    int64_t after_bytes = 0;
  };
  Freed free(void* ptr);
  // Forgets the free whole segment at `ptr` (going back to the system); returns its bytes.
  int64_t remove(void* ptr);

  int64_t segments() const { return int64_t(segments_.size()); }
  int64_t blocks() const { return int64_t(blocks_.size()); }

 private:
  struct Block {
    int64_t bytes;
    const char* segment;  // the segment's base
    bool free;
  };
  std::map<const char*, Block> blocks_;      // by address, every block of every segment
  std::map<const char*, int64_t> segments_;  // base -> bytes
};

}  // namespace tidal
