#include "tidal/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "tidal/base/clock.h"
#include "tidal/memory_scope.h"
#include "tidal/per_device.h"
#include "tidal/seam/runtime.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

constexpr int64_t kSmall = int64_t(1) << 20;  // blocks up to 1 MiB round to 512 B
constexpr int64_t kSmallRound = 512;
constexpr int64_t kLargeRound = int64_t(64) << 10;  // larger blocks round to 64 KiB

constexpr int64_t kMaxRequest = int64_t(1) << 60;

int64_t round_block(int64_t n) {
  const int64_t r = n <= kSmall ? kSmallRound : kLargeRound;
  return (n + r - 1) / r * r;
}

// A cached block is reused for a request if it wastes at most 1/8 of it (plus one rounding unit).
int64_t max_reuse(int64_t block) { return block + block / 8 + (block <= kSmall ? kSmallRound : kLargeRound); }

// Where streams are tracked, how many fitting cached blocks a request looks through for one freed on its
// own stream before it takes the smallest behind a wait (Note [Cross-stream reuse]).
constexpr int kSameStreamScan = 16;

using LiveBlocks = std::unordered_map<void*, int64_t>;

// Map nodes taken out of an allocator's maps, put back in (into any allocator's: the maps use
// std::allocator) with new contents, so that after warm-up an allocation and a free allocate no node
// (a dry run of an MoE model makes hundreds of thousands of each per step). Per thread, so the
// allocator's own mutex is all that guards its maps.
struct SpareNodes {
  std::vector<FreeBlocks::node_type> free;
  std::vector<LiveBlocks::node_type> live;
  ~SpareNodes();
};

// Set when this thread's spare nodes are destroyed (at its exit), after which tensors that outlive
// them (thread-local or static ones) still free their storage: plain map operations then.
thread_local bool spare_nodes_gone = false;
SpareNodes::~SpareNodes() { spare_nodes_gone = true; }

SpareNodes* spare_nodes() {
  if (spare_nodes_gone) return nullptr;
  thread_local SpareNodes spare;
  return &spare;
}

// This thread's spare nodes of each map (nullptr once they are gone).
std::vector<FreeBlocks::node_type>* spare_free_nodes() {
  SpareNodes* spare = spare_nodes();
  return spare != nullptr ? &spare->free : nullptr;
}
std::vector<LiveBlocks::node_type>* spare_live_nodes() {
  SpareNodes* spare = spare_nodes();
  return spare != nullptr ? &spare->live : nullptr;
}

// Inserts (key, value) into `map` on a spare node where `spares` has one (after the key's other entries, like
// emplace).
template <typename Map>
void insert_on_spare(Map& map, std::vector<typename Map::node_type>* spares, typename Map::key_type key,
                     typename Map::mapped_type value) {
  if (spares == nullptr || spares->empty()) {
    map.emplace(key, value);
    return;
  }
  typename Map::node_type& node = spares->back();
  node.key() = key;
  node.mapped() = value;
  map.insert(std::move(node));
  spares->pop_back();
}

// Erases `it` from `map`, keeping its node in `spares` where there are spares.
template <typename Map>
void erase_to_spare(Map& map, typename Map::iterator it, std::vector<typename Map::node_type>* spares) {
  if (spares != nullptr)
    spares->push_back(map.extract(it));
  else
    map.erase(it);
}

}  // namespace

Allocator::Allocator(std::string name, Device device, MemoryBacking backing, CurrentStreamFn current_stream)
    : name_(std::move(name)), device_(device), backing_(backing), current_stream_(current_stream) {
  TIDAL_ASSERT(!backing_.split_large_blocks || current_stream_ == nullptr, "the ", name_,
               " allocator tracks streams: its blocks cannot be split (Note [Splitting large blocks])");
}

Allocator::~Allocator() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
  // Live blocks at exit belong to static tensors (and keep their pool); the OS reclaims them.
  for (BlockPool& pool : pools_)
    if (pool.all_free()) backing_.free(pool.base(), pool.bytes());
}

void Allocator::account(int64_t delta, int64_t block_delta, MemoryCategory c) {
  CategoryStats& cs = stats_.category[size_t(c)];
  cs.allocated += delta;
  cs.blocks += block_delta;
  cs.peak = std::max(cs.peak, cs.allocated);
  cs.peak_blocks = std::max(cs.peak_blocks, cs.blocks);
  stats_.allocated += delta;
  if (stats_.allocated > stats_.peak_allocated) {
    stats_.peak_allocated = stats_.allocated;
    for (int i = 0; i < kNumMemoryCategories; ++i) stats_.at_peak[size_t(i)] = stats_.category[size_t(i)].allocated;
  }
}

void Allocator::log(int64_t delta, MemoryCategory c, const void* block, MemoryEventKind kind) {
  if (!log_on_) return;
  const MemoryContext& ctx = memory_context();
  events_.push_back({now_ns(), delta, c, ctx.op, ctx.layer, stats_.allocated, stats_.reserved,
                     stats_.category[size_t(c)].allocated, block, ctx.module, kind});
}

void* Allocator::allocate(int64_t nbytes, MemoryCategory category) {
  TIDAL_ASSERT(nbytes >= 0);
  if (nbytes == 0) return nullptr;
  detail::StreamImpl* stream = current_stream_ != nullptr ? current_stream_(device_) : nullptr;
  ReuseWaits waits;
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ptr = allocate_locked(nbytes, category, stream, waits);
  }
  if (waits.empty()) return ptr;
  // Outside the lock: a wait may block until a side stream's worker (which may free memory) issued its event.
  try {
    order_after(*stream, waits);
  } catch (...) {
    deallocate(ptr, nbytes, category);
    throw;
  }
  return ptr;
}

// Note [Splitting large blocks]: whether a request of `want` bytes may take a larger cached block and split it.
bool Allocator::splits(int64_t want) const { return backing_.split_large_blocks && want > kSmall; }

FreeBlocks::iterator Allocator::find_cached_locked(int64_t want, const detail::StreamImpl* stream) {
  const auto first = free_blocks_.lower_bound(want);
  const int64_t most = max_reuse(want);
  if (splits(want)) {  // the smallest that fits: a segment's block of any size (split), another within 1/8
    for (auto it = first; it != free_blocks_.end(); ++it)
      if (it->first <= most || segments_.owns(it->second.ptr)) return it;
    return free_blocks_.end();
  }
  if (first == free_blocks_.end() || first->first > most) return free_blocks_.end();
  if (stream == nullptr) return first;
  int scanned = 0;
  for (auto it = first; it != free_blocks_.end() && it->first <= most && scanned < kSameStreamScan; ++it, ++scanned) {
    auto ev = stream_events_.empty() ? stream_events_.end() : stream_events_.find(it->second.ptr);
    if (!needs_wait(it->second, ev == stream_events_.end() ? nullptr : &ev->second, stream)) return it;
  }
  return first;  // the smallest that fits, behind a wait
}

// Takes the cached block at `it` for a request of `want` bytes: its address; `block` its bytes (a segment's block
// more than 1 MiB larger keeps `want` of them, and the rest stays cached as a block of its own).
void* Allocator::take_cached_locked(FreeBlocks::iterator it, int64_t want, int64_t& block) {
  block = it->first;
  void* const ptr = it->second.ptr;
  erase_to_spare(free_blocks_, it, spare_free_nodes());
  cached_bytes_ -= block;
  if (!segments_.owns(ptr)) return ptr;
  segments_.take(ptr);
  if (splits(want) && block - want > kSmall) {
    cache_free_block_locked(segments_.split(ptr, want), block - want, nullptr);
    block = want;
  }
  return ptr;
}

// A free block of `block` bytes into the cache (a map node from this thread's spares where there is one).
void Allocator::cache_free_block_locked(void* ptr, int64_t block, detail::StreamImpl* freed_on) {
  insert_on_spare(free_blocks_, spare_free_nodes(), block, FreeBlock{ptr, freed_on});
  cached_bytes_ += block;
}

// Takes the cached block of `block` bytes at `ptr` out of the cache (a free neighbour merged into another).
void Allocator::uncache_locked(void* ptr, int64_t block) {
  auto [it, end] = free_blocks_.equal_range(block);
  while (it != end && it->second.ptr != ptr) ++it;
  TIDAL_ASSERT(it != end, "a merged block the ", name_, " allocator's cache does not hold");
  erase_to_spare(free_blocks_, it, spare_free_nodes());
  cached_bytes_ -= block;
}

// Note [Release before growing]: by how much a new block of `want` bytes would take the reserve above 1/16 more
// than its live blocks' peak, where the backing bounds it (else 0).
int64_t Allocator::over_bound_locked(int64_t want) const {
  if (!backing_.release_before_growing) return 0;
  return std::max<int64_t>(0, stats_.reserved + want - live_block_high_ - live_block_high_ / 16);
}

void* Allocator::take_new_block_locked(int64_t want, int64_t nbytes, MemoryCategory category) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (BlockPool& pool : pools_)
      if (void* p = pool.take(want)) {
        ++stats_.pool_allocs;
        return p;
      }
    // Note [Release before growing]: no cached block fits, and growing would take the reserve more than 1/16
    // above the most its live blocks ever held: cached blocks go first, as few as keep it there.
    if (const int64_t over = over_bound_locked(want); attempt == 0 && over > 0 && cached_bytes_ > 0)
      release_cached_locked(over, /*large_only=*/true);
    const bool over_limit = stats_.limit > 0 && stats_.reserved + want > stats_.limit;
    if (void* p = over_limit ? nullptr : backing_.alloc(want)) {
      stats_.reserved += want;
      stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
      ++stats_.system_allocs;
      if (splits(want)) segments_.add(p, want);
      return p;
    }
    if (attempt == 0) release_cached_locked();  // then once more: the cache's blocks went back
  }
  throw_oom(nbytes, category);
}

void* Allocator::allocate_locked(int64_t nbytes, MemoryCategory category, detail::StreamImpl* stream,
                                 ReuseWaits& waits) {
  // No machine has 2^60 bytes; refusing such requests here also keeps the rounding and the limit
  // arithmetic below far from int64's end.
  if (nbytes > kMaxRequest) throw_oom(nbytes, category);
  const int64_t want = round_block(nbytes);
  void* ptr = nullptr;
  int64_t block = 0;
  auto it = find_cached_locked(want, stream);
  if (it != free_blocks_.end()) {
    if (stream != nullptr) {
      auto ev = stream_events_.find(it->second.ptr);
      waits = reuse_waits(it->second, ev == stream_events_.end() ? nullptr : &ev->second, stream);
      if (!waits.empty()) ++cross_stream_reuses_;
      if (ev != stream_events_.end()) stream_events_.erase(ev);
    }
    ptr = take_cached_locked(it, want, block);
    ++stats_.cache_hits;
  } else {
    ptr = take_new_block_locked(want, nbytes, category);
    block = want;
  }
  live_block_high_ = std::max(live_block_high_, stats_.reserved - cached_bytes_);
  insert_on_spare(live_blocks_, spare_live_nodes(), ptr, block);
  ++stats_.num_allocs;
  ++stats_.total_allocs;
  CategoryStats& cs = stats_.category[size_t(category)];
  ++cs.count;
  ++cs.total_count;
  account(nbytes, block, category);
  log(nbytes, category, ptr, MemoryEventKind::allocate);
  return ptr;
}

void Allocator::deallocate(void* ptr, int64_t nbytes, MemoryCategory category) {
  if (ptr == nullptr) return;
  // A side stream's free records its event now (Note [Cross-stream reuse]); the compute stream's at a reuse.
  detail::StreamImpl* stream = current_stream_ != nullptr ? current_stream_(device_) : nullptr;
  std::shared_ptr<detail::EventState> freed;
  bool withheld = false;
  if (stream != nullptr && !stream->is_compute()) try {
      freed = stream->record();
    } catch (...) {  // a failing stream (its error surfaces where it is waited for): never reuse the block
      withheld = true;
    }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_blocks_.find(ptr);
  TIDAL_ASSERT(it != live_blocks_.end(), "free of a pointer the ", name_, " allocator does not own");
  const int64_t block = it->second;
  if (freed) add_stream_event(stream_events_[ptr], {stream, std::move(freed)});
  erase_to_spare(live_blocks_, it, spare_live_nodes());
  if (withheld) {
    stream_events_.erase(ptr);  // still reserved, in no map
  } else if (!segments_.owns(ptr)) {
    cache_free_block_locked(ptr, block, stream);
  } else {  // Note [Splitting large blocks]: merged with its free neighbours (no stream is tracked here)
    const BlockSegments::Freed merged = segments_.free(ptr);
    if (merged.before != nullptr) uncache_locked(merged.before, merged.before_bytes);
    if (merged.after != nullptr) uncache_locked(merged.after, merged.after_bytes);
    cache_free_block_locked(merged.ptr, merged.bytes, nullptr);
  }
  --stats_.num_allocs;
  --stats_.category[size_t(category)].count;
  account(-nbytes, -block, category);
  log(-nbytes, category, ptr, MemoryEventKind::free);
}

void Allocator::recategorize(void* ptr, int64_t nbytes, MemoryCategory from, MemoryCategory to) {
  if (ptr == nullptr || from == to) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_blocks_.find(ptr);
  TIDAL_ASSERT(it != live_blocks_.end(), "recategorize of a pointer the ", name_, " allocator does not own");
  CategoryStats& f = stats_.category[size_t(from)];
  CategoryStats& t = stats_.category[size_t(to)];
  f.allocated -= nbytes;
  f.blocks -= it->second;
  --f.count;
  t.allocated += nbytes;
  t.blocks += it->second;
  ++t.count;
  ++t.total_count;
  t.peak = std::max(t.peak, t.allocated);
  t.peak_blocks = std::max(t.peak_blocks, t.blocks);
  if (stats_.allocated == stats_.peak_allocated)
    for (int i = 0; i < kNumMemoryCategories; ++i) stats_.at_peak[size_t(i)] = stats_.category[size_t(i)].allocated;
  if (log_on_) {
    log(-nbytes, from, ptr, MemoryEventKind::recategorize_from);
    log(nbytes, to, ptr, MemoryEventKind::recategorize_to);
  }
}

void Allocator::record_stream(void* ptr, detail::StreamImpl& stream) {
  if (current_stream_ == nullptr || ptr == nullptr) return;
  std::shared_ptr<detail::EventState> event = stream.record();
  std::lock_guard<std::mutex> lock(mu_);
  TIDAL_ASSERT(live_blocks_.count(ptr) == 1, "record_stream of a pointer the ", name_,
               " allocator does not hold live (a view's address, or freed bytes)");
  add_stream_event(stream_events_[ptr], {&stream, std::move(event)});
}

int64_t Allocator::cross_stream_reuses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cross_stream_reuses_;
}

// A cached block that can go back (to its pool or the system): the smallest holding `bytes`, else the largest;
// end() if none. A segment's block goes back only while it spans its whole segment (Note [Splitting large blocks]);
// with `large_only`, only blocks above 1 MiB (Note [Release before growing]).
FreeBlocks::iterator Allocator::releasable_locked(int64_t bytes, bool large_only) {
  const auto releasable = [&](FreeBlocks::iterator it) {
    if (large_only && it->first <= kSmall) return false;
    return !segments_.owns(it->second.ptr) || segments_.whole_free_segment(it->second.ptr);
  };
  for (auto it = free_blocks_.lower_bound(bytes); it != free_blocks_.end(); ++it)
    if (releasable(it)) return it;
  for (auto it = free_blocks_.end(); it != free_blocks_.begin();)
    if (releasable(--it)) return it;
  return free_blocks_.end();
}

// Cached blocks go back to their pool or to the system until they hold `bytes` (all of them by default): each
// time the smallest block that holds what is left, else the largest (with `large_only`, of those above 1 MiB). A
// device's free (cudaFree) waits for the work queued on it, so their stream events are done with.
void Allocator::release_cached_locked(int64_t bytes, bool large_only) {
  int64_t released = 0;
  while (released < bytes) {
    const auto it = releasable_locked(bytes - released, large_only);
    if (it == free_blocks_.end()) break;
    const int64_t block = it->first;
    void* const ptr = it->second.ptr;
    free_blocks_.erase(it);
    cached_bytes_ -= block;
    released += block;
    if (!stream_events_.empty()) stream_events_.erase(ptr);
    if (segments_.owns(ptr)) segments_.remove(ptr);
    auto pool = std::find_if(pools_.begin(), pools_.end(), [&](const BlockPool& p) { return p.owns(ptr); });
    if (pool != pools_.end()) {
      pool->give(ptr, block);
      continue;
    }
    backing_.free(ptr, block);
    stats_.reserved -= block;
    ++stats_.system_frees;
  }
}

void Allocator::set_release_before_growing(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  backing_.release_before_growing = on;
}

void Allocator::set_split_large_blocks(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  TIDAL_CHECK(!on || current_stream_ == nullptr, "[memory] the ", name_,
              " allocator orders blocks by stream: it cannot split them (TIDAL_DEVICE_CACHE=split is for the CPU)");
  backing_.split_large_blocks = on;  // blocks split earlier still merge when freed
}

bool Allocator::splits_large_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return backing_.split_large_blocks;
}

bool Allocator::releases_before_growing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return backing_.release_before_growing;
}

void Allocator::reserve_pool(int64_t bytes) {
  TIDAL_CHECK(bytes > 0, "[memory] a pool of the ", name_, " allocator needs > 0 bytes, got ", bytes);
  // A pool takes its blocks back without the wait for queued work that a device's own free implies.
  TIDAL_CHECK(current_stream_ == nullptr, "[memory] the ", name_,
              " allocator orders blocks by stream; pools are for memory no stream tracks (host memory)");
  TIDAL_CHECK(bytes <= kMaxRequest, "[memory] a pool of ", format_bytes(bytes), " is more than any machine has");
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t want = (bytes + kSmallRound - 1) / kSmallRound * kSmallRound;  // every block is a multiple
  release_cached_locked();
  void* base = stats_.limit > 0 && stats_.reserved + want > stats_.limit ? nullptr : backing_.alloc(want);
  if (base == nullptr) {
    ++stats_.num_ooms;
    throw OutOfMemory(detail::str_cat("[memory] cannot reserve a pool of ", format_bytes(want), " on ", name_, " with ",
                                      format_bytes(stats_.reserved), " reserved of the ",
                                      stats_.limit > 0 ? format_bytes(stats_.limit) + " limit" : "system's memory",
                                      ".\n", format_breakdown(stats_)),
                      want, stats_);
  }
  pools_.emplace_back(base, want);
  stats_.reserved += want;
  stats_.pool_reserved += want;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  ++stats_.system_allocs;
}

int64_t Allocator::pool_cached_blocks() {
  int64_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!backing_.pool_after_first_step || current_stream_ != nullptr || !pools_.empty()) return 0;
    for (const auto& [block, cached] : free_blocks_) bytes += block;
  }
  if (bytes == 0) return 0;
  reserve_pool(bytes);  // a sum of blocks: exactly their bytes
  return bytes;
}

void Allocator::throw_oom(int64_t nbytes, MemoryCategory c) {
  ++stats_.num_ooms;
  log(nbytes, c, nullptr, MemoryEventKind::failed);
  const MemoryContext& ctx = memory_context();
  std::string where = std::string(category_name(c));
  if (ctx.op != nullptr) where += detail::str_cat(", op ", ctx.op);
  if (ctx.layer >= 0) where += detail::str_cat(", layer ", ctx.layer);
  std::string msg = detail::str_cat(
      "[memory] out of memory on ", name_, ": tried to allocate ", format_bytes(nbytes), " (", where, ") with ",
      format_bytes(stats_.allocated), " allocated and ", format_bytes(stats_.reserved), " reserved of the ",
      stats_.limit > 0 ? format_bytes(stats_.limit) + " limit" : std::string("system's memory"), ".\n",
      format_breakdown(stats_),
      "What to try: a smaller --micro-batch-size or --seq-length, activation recompute, activation offload, "
      "or a larger limit (TIDAL_DEVICE_MEMORY).");
  throw OutOfMemory(msg, nbytes, stats_);
}

MemoryStats Allocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Allocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    stats_.category[size_t(i)].peak = stats_.category[size_t(i)].allocated;
    stats_.category[size_t(i)].peak_blocks = stats_.category[size_t(i)].blocks;
    stats_.at_peak[size_t(i)] = stats_.category[size_t(i)].allocated;
  }
}

void Allocator::set_limit(int64_t bytes) {
  TIDAL_CHECK(bytes >= 0, "[memory] the capacity limit must be >= 0 bytes, got ", bytes);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.limit = bytes;
}

int64_t Allocator::limit() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_.limit;
}

void Allocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

MemoryStats Allocator::set_event_log(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  log_on_ = on;
  if (on) events_.reserve(1 << 16);
  return stats_;
}

std::vector<MemoryEvent> Allocator::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

void Allocator::clear_events() {
  std::lock_guard<std::mutex> lock(mu_);
  events_.clear();
}

std::vector<MemoryEvent> Allocator::take_events() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<MemoryEvent> out = std::move(events_);
  events_.clear();
  if (log_on_) events_.reserve(1 << 16);
  return out;
}

// --- the process's allocators, on their devices' memory

namespace {

void apply_limit_from_env(Allocator& a) {
  const char* env = std::getenv("TIDAL_DEVICE_MEMORY");
  if (env == nullptr || *env == '\0') return;
  int64_t limit = 0;
  try {
    limit = parse_bytes(env);
  } catch (const Error& e) {
    throw Error(std::string("TIDAL_DEVICE_MEMORY: ") + e.what());
  }
  a.set_limit(limit);
}

// TIDAL_DEVICE_CACHE: comma-separated words, each optional. keep|release: whether the device allocator keeps every
// cached block (fastest where a step's sizes change) or gives cached blocks back before its reserve grows above its
// live blocks' peak (the CPU's default: the process's resident memory stays near the device peak; Note [Release
// before growing]). split|nosplit: whether a larger cached block serves a large request by splitting (the CPU's
// default; Note [Splitting large blocks]), only where no stream is tracked.
void apply_cache_policy_from_env(Allocator& a) {
  const char* env = std::getenv("TIDAL_DEVICE_CACHE");
  if (env == nullptr || *env == '\0') return;
  const std::string v = env;
  const auto bad = [&](const std::string& why) {
    return Error(detail::str_cat("TIDAL_DEVICE_CACHE: ", why, ", got '", v,
                                 "' (keep: the allocator holds its cached blocks; release: it gives them back before "
                                 "growing; split: a larger cached block serves a large request; nosplit: blocks are "
                                 "reused whole; e.g. TIDAL_DEVICE_CACHE=release,split)"));
  };
  std::optional<bool> release, split;
  for (size_t begin = 0; begin <= v.size();) {
    const size_t end = std::min(v.find(',', begin), v.size());
    const std::string word = v.substr(begin, end - begin);
    std::optional<bool>& slot = word == "keep" || word == "release" ? release : split;
    if (word != "keep" && word != "release" && word != "split" && word != "nosplit")
      throw bad("expected keep or release, split or nosplit (comma-separated)");
    if (slot.has_value()) throw bad("'" + word + "' after another word of its kind");
    slot = word == "release" || word == "split";
    begin = end + 1;
  }
  if (release.has_value()) a.set_release_before_growing(*release);
  if (split.has_value()) a.set_split_large_blocks(*split);
}

detail::StreamImpl* current_stream_impl(Device device) { return &current_stream(device).impl(); }

}  // namespace

Allocator& device_allocator(Device device) {
  static PerDevice<Allocator> allocators;
  return allocators.get(device, [](Device d) {
    const MemoryBacking backing = device_runtime(d).device_backing();
    auto a = std::make_unique<Allocator>(d.str(), d, backing, backing.stream_ordered ? current_stream_impl : nullptr);
    if (a->touches_memory()) {  // each throws while its variable is bad: made again
      apply_limit_from_env(*a);
      apply_cache_policy_from_env(*a);
    }
    return a;
  });
}

Allocator& host_allocator(Device device) {
  static PerDevice<Allocator> allocators;
  return allocators.get(device, [](Device d) {
    const std::string name = d.is_meta() ? "meta host" : "host";
    return std::make_unique<Allocator>(name, d, device_runtime(d).host_backing(HostMemory::pinned));
  });
}

}  // namespace tidal
