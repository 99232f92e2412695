#pragma once
// A caching allocator per device, with exact accounting (see docs/memory-accounting.md).
// Freed blocks are cached and reused, so a training step in steady state asks the system for nothing.
// An optional capacity limit emulates a smaller device: exceeding it throws tidal::OutOfMemory.
// On a device whose queued work runs after the host moved on (CUDA), a block freed while work on one
// stream may still use it is handed to work on another stream only behind an event (Note
// [Cross-stream reuse], allocator_streams.h).
//
// Note [Splitting large blocks]
// Where the backing says so (split_large_blocks: the CPU, where no stream is tracked), each system allocation above
// 1 MiB is a segment (block_segments.h): a request above 1 MiB takes the smallest cached block that holds it, and
// one more than 1 MiB larger is split (the request's bytes at its start, the rest cached as a block of its own);
// a freed block merges with the free blocks beside it in its segment, and a segment goes back to the system only
// when it is one free block again. So the blocks a step frees serve its next requests of other sizes (forward's
// activations from backward's freed gradients, the logits from the layers' freed blocks) instead of the reserve
// growing for them. Requests up to 1 MiB keep the rule below (a cached block within 1/8 of their size), apart
// from the segments: small blocks split large ones into slivers no large request could use again.
//
// Note [Release before growing]
// Without splitting, a cached block serves a request that wastes at most 1/8 of it, so blocks freed in one size
// do not serve requests of another: a step whose sizes change as it goes (forward's activations, backward's
// gradients, the optimizer's first states) would keep a cache of the wrong sizes beside new blocks, its reserve
// well above its peak of live ones (GPT-2 124M, 4 x 512 tokens, fp32: 3.95 GiB reserved for live blocks of at most
// 3.30 GiB). Where the backing says so (release_before_growing: the CPU, whose device is the process's RAM), a
// request no cached block fits, which would take the reserve more than 1/16 above the most bytes its live blocks
// ever held, first gives cached blocks above 1 MiB back to the system, as few as keep it there (each time the
// smallest block that holds what is left, else the largest; a segment's only while it is whole). Small blocks stay:
// they come from malloc, whose heap keeps them resident anyway, and giving them back made tiny models' steady steps
// ask the system again. Releasing every cached block at each miss instead cost 124M 30% of its step time
// (backward's misses gave back blocks it needed again a layer later). With splitting the reserve stays near the
// live peak by itself (124M: 3.36 GiB, keep or release) and a steady step allocates nothing; without it the
// release held 124M at 3.51 GiB for two large blocks given back and taken again each step. CUDA keeps its cache
// (cudaMalloc and cudaFree synchronize the device); TIDAL_DEVICE_CACHE=keep keeps it on the CPU.
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tidal/allocator_streams.h"
#include "tidal/base/error.h"
#include "tidal/block_pool.h"
#include "tidal/block_segments.h"
#include "tidal/device.h"
#include "tidal/memory_stats.h"
#include "tidal/seam/memory_backing.h"

namespace tidal {

// Thrown when an allocation would take the reserved bytes past the capacity limit.
class OutOfMemory : public Error {
 public:
  OutOfMemory(std::string message, int64_t requested, MemoryStats stats)
      : Error(std::move(message)), requested_(requested), stats_(stats) {}
  int64_t requested() const { return requested_; }
  const MemoryStats& stats() const { return stats_; }  // at the moment of the failure

 private:
  int64_t requested_;
  MemoryStats stats_;
};

class Allocator {
 public:
  // Blocks come from `backing`, the device's memory (seam/memory_backing.h). `current_stream` (given
  // where backing.stream_ordered) names the stream the calling thread's work runs on: cached blocks
  // then remember where they were freed (Note [Cross-stream reuse]); nullptr: no stream is tracked.
  Allocator(std::string name, Device device, MemoryBacking backing, CurrentStreamFn current_stream = nullptr);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // nbytes == 0 returns nullptr and records nothing.
  void* allocate(int64_t nbytes, MemoryCategory category);
  void deallocate(void* ptr, int64_t nbytes, MemoryCategory category);
  // Moves a live allocation's bytes from one category to another.
  void recategorize(void* ptr, int64_t nbytes, MemoryCategory from, MemoryCategory to);
  // Work queued on `stream` so far uses the live block at `ptr` (PyTorch's record_stream, called after
  // queueing that work): once freed, the block is reused elsewhere only after it. No-op where no
  // stream is tracked (the CPU, meta, host memory).
  void record_stream(void* ptr, detail::StreamImpl& stream);
  // Cached blocks reused on another stream than the one they were freed on (each behind events).
  int64_t cross_stream_reuses() const;

  // Takes `bytes` from the system as one pool, from which later cache misses carve their blocks
  // instead of asking the system per block (stats: pool_reserved, pool_allocs); the cached free
  // blocks go back to the system first. A pool lasts as long as the allocator. Over the limit: OutOfMemory.
  void reserve_pool(int64_t bytes);
  // The bytes of the cached free blocks, as one pool, where the backing asks for it
  // (pool_after_first_step: pinned host memory) and no pool is there yet: called after a training
  // run's first step, so the later steps carve from one allocation. Returns the pool's bytes (0: none).
  int64_t pool_cached_blocks();

  MemoryStats stats() const;
  void reset_peak_stats();        // peaks := current values
  void set_limit(int64_t bytes);  // 0 removes the limit
  // Whether a request that would grow the reserve gives cached blocks back first (Note [Release before growing]);
  // the backing's choice until set (TIDAL_DEVICE_CACHE).
  void set_release_before_growing(bool on);
  bool releases_before_growing() const;
  // Whether a larger cached block serves a request above 1 MiB by splitting (Note [Splitting large blocks]); the
  // backing's choice until set (TIDAL_DEVICE_CACHE). Not where streams are tracked.
  void set_split_large_blocks(bool on);
  bool splits_large_blocks() const;
  int64_t limit() const;
  void empty_cache();  // returns cached free blocks to the system (a pool's to their pool)

  // Turns the event log on or off; returns the stats at that moment (the log's starting point).
  MemoryStats set_event_log(bool on);
  std::vector<MemoryEvent> events() const;
  void clear_events();
  std::vector<MemoryEvent> take_events();  // events() and clear_events() at once

  const std::string& name() const { return name_; }
  Device device() const { return device_; }
  bool touches_memory() const { return backing_.touches_memory; }

 private:
  void account(int64_t delta, int64_t block_delta, MemoryCategory c);
  void log(int64_t delta, MemoryCategory c, const void* block, MemoryEventKind kind);
  void* allocate_locked(int64_t nbytes, MemoryCategory category, detail::StreamImpl* stream, ReuseWaits& waits);
  FreeBlocks::iterator find_cached_locked(int64_t want, const detail::StreamImpl* stream);
  bool splits(int64_t want) const;
  void* take_cached_locked(FreeBlocks::iterator it, int64_t want, int64_t& block);
  void cache_free_block_locked(void* ptr, int64_t block, detail::StreamImpl* freed_on);
  void uncache_locked(void* ptr, int64_t block);
  FreeBlocks::iterator releasable_locked(int64_t bytes, bool large_only);
  void* take_new_block_locked(int64_t want, int64_t nbytes, MemoryCategory category);
  int64_t over_bound_locked(int64_t want) const;
  void release_cached_locked(int64_t bytes = std::numeric_limits<int64_t>::max(), bool large_only = false);
  [[noreturn]] void throw_oom(int64_t nbytes, MemoryCategory c);

  std::string name_;
  Device device_;
  MemoryBacking backing_;
  CurrentStreamFn current_stream_;
  mutable std::mutex mu_;
  FreeBlocks free_blocks_;                          // block size -> cached block
  int64_t cached_bytes_ = 0;                        // of the blocks in free_blocks_
  int64_t live_block_high_ = 0;                     // the most bytes live blocks ever held (not reset)
  std::unordered_map<void*, int64_t> live_blocks_;  // ptr -> block size
  BlockStreamEvents stream_events_;                 // what a block's reuse elsewhere waits for
  int64_t cross_stream_reuses_ = 0;
  std::vector<BlockPool> pools_;
  BlockSegments segments_;  // the large blocks, where the backing splits them (Note [Splitting large blocks])
  MemoryStats stats_;
  bool log_on_ = false;
  std::vector<MemoryEvent> events_;
};

// The allocator of a device, made on first use on the memory its backend provides (seam/runtime.h).
// A real device's allocator takes its limit from TIDAL_DEVICE_MEMORY (e.g. "8GiB") when set.
Allocator& device_allocator(Device device);
// Host memory, the offload and swap target: pinned memory of the device being trained on, with
// accounting separate from the device pool (on the CPU backend both live in the same RAM). The meta
// device's host side (a dry run's offload and swap states) is a meta host allocator: counted exactly
// like the real one (same rounding, categories, peaks), fake addresses, nothing touched. Its tensors
// are meta tensors, so copies between them and the meta device run no kernel.
Allocator& host_allocator(Device device = Device::cpu());

}  // namespace tidal
