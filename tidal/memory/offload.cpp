// Note [Offload lifetime]
// Pack (forward, inside block b): a tensor the check accepts gets an Entry per storage (a storage saved
// twice is copied once). Its storage is marked as saved (an activation on the device), an event on the
// compute stream orders the copy after everything computed so far, and the D2H stream copies the bytes
// to a host buffer (or, through the staging buffer, to the spill file). The saved tensor holds a Handle:
// the entry plus the view (shape, strides, offset) it saved.
// Release: when block b+1 starts, every entry of block b waits for its D2H event (normally done long
// ago) and releases its device bytes: Storage::release keeps the object, so handles stay valid. A
// storage some live tensor still refers to (the next block's input, a tensor every block uses, a value
// the caller keeps) is not released: its entry moves on to the next block and is tried again when that
// one ends. One that is still on the device when backward reaches it never left: its copy is dropped
// and its bytes count as in use, not offloaded.
// Unpack (backward): the first unpack of block b issues prefetches of blocks b-1 ... b-depth (device
// bytes rematerialized, then an H2D copy each); the unpacked entry waits on its own H2D event only. The
// last block keeps its tensors; its first unpack starts the prefetch of the blocks before it.
// An entry ends with its last handle, after the backward of the nodes that saved it: it unmarks the
// storage and gives back its host buffer or file region. Copies hold shared references to what they
// read and write, so nothing is freed under a copy in flight. Errors of the copy streams surface at
// the event waits above, as tidal::Error.
#include "tidal/memory/offload.h"

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "tidal/base/clock.h"
#include "tidal/memory/spill_file.h"
#include "tidal/memory_scope.h"
#include "tidal/stream.h"

namespace tidal::memory {

double OffloadStats::overlap_fraction() const {
  const int64_t copy = d2h_ns + h2d_ns;
  if (copy == 0) return 1.0;
  return std::max(0.0, 1.0 - double(exposed_wait_ns) / double(copy));
}

namespace {

struct Entry;

struct Counters {
  std::atomic<int64_t> offloaded_bytes{0}, kept_bytes{0}, in_use_bytes{0}, offloaded_tensors{0}, exposed_wait_ns{0};
  int64_t d2h_busy_start = 0, h2d_busy_start = 0;  // the copy streams' busy time at the last reset
};

}  // namespace

struct Offloader::Impl {
  explicit Impl(const OffloadOptions& o)
      : options(o), d2h("offload d2h", o.device), h2d("offload h2d", o.device), host(host_allocator(o.device)) {}
  OffloadOptions options;
  Stream d2h, h2d;
  Allocator& host;  // the device's host memory
  std::unique_ptr<SpillFile> spill;
  std::shared_ptr<Storage> d2h_staging, h2d_staging;  // disk tier, one per copy stream
  Counters counters;
  int64_t micro_batch = 0;
  // The current micro-batch: entries by storage id (one copy per storage), and per block.
  std::map<uint64_t, std::weak_ptr<Entry>> by_storage;
  std::map<uint64_t, bool> kept_storage;  // storages whose first save kept them: later saves keep them too
  std::map<int64_t, std::vector<std::weak_ptr<Entry>>> blocks;
  std::map<int64_t, bool> prefetched;

  void release_block(int64_t block);
  void prefetch_from(int64_t block);
  void ensure_prefetched(Entry& e);
  // The disk tier: device bytes through the staging buffer of each copy stream, a chunk at a time
  // (the device copy, then the file I/O, in the stream's order).
  void spill_out(const std::shared_ptr<Storage>& s, int64_t offset);
  void spill_in(const std::shared_ptr<Storage>& s, int64_t offset);
  void wait(Event& ev) {
    if (ev.query()) {
      ev.synchronize();  // done: only rethrows a stored error
      return;
    }
    const int64_t t0 = now_ns();
    ev.synchronize();
    counters.exposed_wait_ns += now_ns() - t0;
  }
};

namespace {

enum class State { copying_out, offloaded, prefetching, on_device };

struct Entry {
  using Bytes = std::pair<std::shared_ptr<Storage>, std::shared_ptr<Storage>>;  // device and host, kept for a copy
  Offloader::Impl* owner;
  int64_t micro_batch, block, index;
  std::shared_ptr<Storage> storage;  // device bytes: released while offloaded, same object throughout
  std::shared_ptr<Storage> host;     // host tier
  int64_t file_offset = -1;          // disk tier
  Event d2h_done, h2d_done;
  State state = State::copying_out;

  ~Entry() {
    // Copies in flight hold their own references; wait so the file region is not reused under them.
    try {
      if (state == State::copying_out) d2h_done.synchronize();
      if (state == State::prefetching) h2d_done.synchronize();
    } catch (...) {  // the error was (or will be) reported where the step waits
    }
    storage->unmark_saved();
    if (file_offset >= 0) owner->spill->release(file_offset);
    try {  // completed copies let go of their buffers now, not at the next copy (a CUDA stream holds them)
      owner->d2h.query();
      owner->h2d.query();
    } catch (...) {  // reported where the step waits
    }
  }
};

// What a hooked saved tensor holds: an entry and its view, or the tensor itself when it stays.
struct Handle {
  std::shared_ptr<Entry> entry;
  Tensor kept;  // not offloaded (parameter, rejected, last block, host cap reached)
  Shape shape, strides;
  int64_t offset = 0;
  DType dtype = DType::f32;
  int64_t block = 0;
  ~Handle() {
    if (kept.defined()) kept.storage()->unmark_saved();
  }
};

// Byte `at` of `data`; nullptr for a meta storage's bytes, which have no address (nothing moves them).
void* byte_at(void* data, int64_t at) { return data == nullptr ? nullptr : static_cast<char*>(data) + at; }

bool never_offloaded(const Tensor& t) {
  const std::shared_ptr<Storage>& s = t.storage();
  const MemoryCategory c = s->base_category();
  return s->nbytes() == 0 || s->will_recompute() || c == MemoryCategory::parameter || c == MemoryCategory::gradient ||
         c == MemoryCategory::optimizer_state || !s->is_materialized();
}

class OffloadHooks : public autograd::SavedTensorHooks {
 public:
  OffloadHooks(Offloader::Impl& impl, int64_t block, bool last, OffloadCheck check)
      : impl_(impl), block_(block), last_(last), check_(std::move(check)) {}

  const char* policy(const std::shared_ptr<void>& packed) const override {
    return static_cast<const Handle*>(packed.get())->kept.defined() ? "kept" : "offloaded";
  }

  std::shared_ptr<void> pack(const Tensor& t) override {
    auto h = std::make_shared<Handle>();
    h->block = block_;
    const std::shared_ptr<Storage>& s = t.storage();
    // A storage has one fate in a micro-batch, decided at its first save: a later save of the same
    // bytes (another op, another block) follows it, so kept bytes are never released under a handle.
    std::shared_ptr<Entry> e = impl_.by_storage[s->id()].lock();
    if (!e && (impl_.kept_storage.count(s->id()) || last_ || never_offloaded(t) || (check_ && !check_(t)))) {
      impl_.kept_storage[s->id()] = true;
      return keep(h, t);
    }
    if (!e) {
      const OffloadOptions& o = impl_.options;
      if (o.target == OffloadTarget::host && o.host_limit > 0 &&
          impl_.host.stats().allocated + s->nbytes() > o.host_limit) {
        impl_.counters.kept_bytes += s->nbytes();
        impl_.kept_storage[s->id()] = true;
        return keep(h, t);
      }
      e = start_copy(s);
    }
    h->entry = e;
    h->shape = t.shape();
    h->strides = t.strides();
    h->offset = t.offset();
    h->dtype = t.dtype();
    return h;
  }

  Tensor unpack(const std::shared_ptr<void>& packed) override {
    Handle& h = *static_cast<Handle*>(packed.get());
    if (!impl_.prefetched[h.block]) {  // the block's first unpack: start bringing the earlier ones back
      impl_.prefetched[h.block] = true;
      impl_.prefetch_from(h.block);
    }
    if (h.kept.defined()) return h.kept;
    Entry& e = *h.entry;
    impl_.ensure_prefetched(e);
    if (e.state == State::prefetching) {
      impl_.wait(e.h2d_done);
      e.state = State::on_device;
    }
    return Tensor(e.storage, h.shape, h.strides, h.offset, h.dtype);
  }

 private:
  std::shared_ptr<void> keep(const std::shared_ptr<Handle>& h, const Tensor& t) {
    h->kept = t;
    t.storage()->mark_saved();
    return h;
  }

  std::shared_ptr<Entry> start_copy(const std::shared_ptr<Storage>& s) {
    auto e = std::make_shared<Entry>();
    e->owner = &impl_;
    e->micro_batch = impl_.micro_batch;
    e->block = block_;
    e->index = int64_t(impl_.blocks[block_].size());
    e->storage = s;
    s->mark_saved();
    const int64_t n = s->nbytes();
    Event computed;
    computed.record(Stream::compute(impl_.options.device));
    impl_.d2h.wait(computed);
    Counters& c = impl_.counters;
    if (impl_.options.target == OffloadTarget::host) {
      e->host = Storage::make_host(n, impl_.options.device);
      impl_.d2h.copy(e->host->data(), s->data(), n, "offload d2h", std::make_shared<const Entry::Bytes>(s, e->host));
    } else {
      e->file_offset = impl_.spill->allocate(n);
      impl_.spill_out(s, e->file_offset);
    }
    e->d2h_done.record(impl_.d2h);
    c.offloaded_bytes += n;
    ++c.offloaded_tensors;
    impl_.by_storage[s->id()] = e;
    impl_.blocks[block_].push_back(e);
    return e;
  }

  Offloader::Impl& impl_;
  int64_t block_;
  bool last_;
  OffloadCheck check_;
};

}  // namespace

void Offloader::Impl::release_block(int64_t block) {
  auto it = blocks.find(block);
  if (it == blocks.end()) return;
  std::vector<std::weak_ptr<Entry>> still_used;
  for (const std::weak_ptr<Entry>& w : it->second) {
    std::shared_ptr<Entry> e = w.lock();
    if (!e || e->state != State::copying_out) continue;
    wait(e->d2h_done);
    d2h.query();  // the completed copy lets go of the bytes (a CUDA stream holds them until asked)
    // A live tensor still refers to the bytes (the next block's input saved by this block, a tensor
    // every block uses, a value the caller holds): releasing them would pull them from under it. The
    // entry moves on to the next block and is tried again when that one ends.
    if (e->storage.use_count() > 1) {
      still_used.push_back(e);
      continue;
    }
    e->storage->release();
    e->state = State::offloaded;
  }
  std::vector<std::weak_ptr<Entry>>& next = blocks[block + 1];
  next.insert(next.end(), still_used.begin(), still_used.end());
}

void Offloader::Impl::ensure_prefetched(Entry& e) {
  if (e.state == State::copying_out) {  // backward reached it before its bytes could be released
    wait(e.d2h_done);
    e.state = State::on_device;
    e.host.reset();  // the copy is not needed: the bytes never left
    if (e.file_offset >= 0) spill->release(e.file_offset);
    e.file_offset = -1;
    counters.offloaded_bytes -= e.storage->nbytes();
    --counters.offloaded_tensors;
    counters.in_use_bytes += e.storage->nbytes();
    return;
  }
  if (e.state != State::offloaded) return;
  {
    // The h2d copy writes the new bytes first: a block freed on the compute stream, whose kernels may still
    // be queued, is handed to the h2d stream behind them (allocator_streams.h, Note [Cross-stream reuse]).
    StreamGuard first_used_on(h2d);
    e.storage->rematerialize();
  }
  const std::shared_ptr<Storage> s = e.storage;
  const int64_t n = s->nbytes();
  if (options.target == OffloadTarget::host) {
    h2d.copy(s->data(), e.host->data(), n, "offload h2d", std::make_shared<const Entry::Bytes>(s, e.host));
  } else {
    spill_in(s, e.file_offset);
  }
  e.h2d_done.record(h2d);
  e.state = State::prefetching;
}

void Offloader::Impl::spill_out(const std::shared_ptr<Storage>& s, int64_t offset) {
  const int64_t n = s->nbytes(), chunk = d2h_staging->nbytes();
  for (int64_t done = 0; done < n; done += chunk) {
    const int64_t k = std::min(chunk, n - done);
    d2h.copy(d2h_staging->data(), byte_at(s->data(), done), k, "offload d2h (disk)", s);
    d2h.enqueue([this, at = offset + done, k] { spill->write(at, d2h_staging->data(), k); }, "offload d2h (disk)");
  }
}

void Offloader::Impl::spill_in(const std::shared_ptr<Storage>& s, int64_t offset) {
  const int64_t n = s->nbytes(), chunk = h2d_staging->nbytes();
  for (int64_t done = 0; done < n; done += chunk) {
    const int64_t k = std::min(chunk, n - done);
    h2d.enqueue([this, at = offset + done, k] { spill->read(at, h2d_staging->data(), k); }, "offload h2d (disk)");
    h2d.copy(byte_at(s->data(), done), h2d_staging->data(), k, "offload h2d (disk)", s);
  }
}

void Offloader::Impl::prefetch_from(int64_t block) {
  for (int64_t b = block; b >= std::max<int64_t>(0, block - options.prefetch_depth); --b) {
    auto it = blocks.find(b);
    if (it == blocks.end()) continue;
    for (const std::weak_ptr<Entry>& w : it->second)
      if (std::shared_ptr<Entry> e = w.lock()) ensure_prefetched(*e);
  }
}

Offloader::Offloader(OffloadOptions options) : options_(std::move(options)) {
  TIDAL_CHECK(options_.prefetch_depth >= 0, "[offload] prefetch depth must be >= 0, got ", options_.prefetch_depth);
  TIDAL_CHECK(options_.host_limit >= 0, "[offload] the host limit must be >= 0 bytes");
  impl_ = std::make_unique<Impl>(options_);
  if (options_.target == OffloadTarget::disk) {
    TIDAL_CHECK(options_.staging_bytes > 0, "[offload] the staging buffer must be > 0 bytes");
    // Host memory that is only counted (meta) gets a spill file that is only counted: no file.
    impl_->spill = impl_->host.touches_memory() ? std::make_unique<SpillFile>(options_.dir) : SpillFile::counted();
    impl_->d2h_staging = Storage::make_host(options_.staging_bytes, options_.device);
    impl_->h2d_staging = Storage::make_host(options_.staging_bytes, options_.device);
  }
}

Offloader::~Offloader() {
  try {
    impl_->d2h.synchronize();
    impl_->h2d.synchronize();
  } catch (...) {  // reported where the step waited; nothing more to do at teardown
  }
}

void Offloader::begin_micro_batch() {
  ++impl_->micro_batch;
  impl_->by_storage.clear();
  impl_->kept_storage.clear();
  impl_->blocks.clear();
  impl_->prefetched.clear();
}

OffloadStats Offloader::stats() const {
  const Counters& c = impl_->counters;
  OffloadStats s;
  s.offloaded_bytes = c.offloaded_bytes;
  s.kept_bytes = c.kept_bytes;
  s.in_use_bytes = c.in_use_bytes;
  s.offloaded_tensors = c.offloaded_tensors;
  s.d2h_ns = impl_->d2h.busy_ns() - c.d2h_busy_start;
  s.h2d_ns = impl_->h2d.busy_ns() - c.h2d_busy_start;
  s.exposed_wait_ns = c.exposed_wait_ns;
  return s;
}

void Offloader::reset_stats() {
  Counters& c = impl_->counters;
  c.offloaded_bytes = c.kept_bytes = c.in_use_bytes = c.offloaded_tensors = c.exposed_wait_ns = 0;
  c.d2h_busy_start = impl_->d2h.busy_ns();
  c.h2d_busy_start = impl_->h2d.busy_ns();
}

AsyncOffload::AsyncOffload(Offloader& offloader, OffloadBlock block) {
  TIDAL_CHECK(block.depth >= 1 && block.block_idx >= 0 && block.block_idx < block.depth, "[offload] block ",
              block.block_idx, " is outside [0, ", block.depth, ")");
  Offloader::Impl& impl = offloader.impl();
  impl.release_block(block.block_idx - 1);
  const bool last = block.block_idx == block.depth - 1;
  guard_ = std::make_unique<autograd::SavedTensorHooksGuard>(
      std::make_shared<OffloadHooks>(impl, block.block_idx, last, std::move(block.check)));
}

AsyncOffload::~AsyncOffload() = default;

nlohmann::json Offloader::stats_json(int64_t steps) const {
  const OffloadStats os = stats();
  const MemoryStats host = impl_->host.stats();
  const double n = double(steps);
  return {{"offloaded_bytes_per_step", double(os.offloaded_bytes) / n},
          {"kept_on_device_bytes_per_step", double(os.kept_bytes) / n},
          {"in_use_bytes_per_step", double(os.in_use_bytes) / n},
          {"d2h_ms", double(os.d2h_ns) / 1e6},
          {"h2d_ms", double(os.h2d_ns) / 1e6},
          {"exposed_wait_ms", double(os.exposed_wait_ns) / 1e6},
          {"overlap_fraction", os.overlap_fraction()},
          {"host_peak_bytes", host.peak_allocated},
          {"host_reserved_bytes", host.reserved},
          {"host_pool_reserved_bytes", host.pool_reserved}};
}

std::string Offloader::describe_stats(int64_t steps) const {
  const OffloadStats os = stats();
  const double n = double(steps);
  char line[256];
  std::snprintf(line, sizeof line, "offload: %s per step to %s, copies %.0f ms, compute waited %.0f ms (overlap %.2f)",
                format_bytes(int64_t(double(os.offloaded_bytes) / n)).c_str(), name(options_.target),
                double(os.d2h_ns + os.h2d_ns) / 1e6, double(os.exposed_wait_ns) / 1e6, os.overlap_fraction());
  if (os.kept_bytes == 0) return line;
  return line +
         (", host cap reached: " + format_bytes(int64_t(double(os.kept_bytes) / n)) + " per step stayed on the device");
}

OffloadOptions offload_options(const OffloadConfig& c, Device device) {
  OffloadOptions o;
  o.device = device;
  o.target = c.target;
  o.dir = c.dir;
  o.prefetch_depth = int(c.prefetch_depth);
  o.host_limit = c.host_limit;
  return o;
}

OffloadCheck offload_check(const OffloadPolicy& policy, const Tensor& block_input) {
  switch (policy.kind) {
    case OffloadPolicyKind::all: return nullptr;
    case OffloadPolicyKind::layer_input: {
      const uint64_t id = block_input.defined() ? block_input.storage()->id() : 0;
      return [id](const Tensor& t) { return t.storage()->id() == id; };
    }
    case OffloadPolicyKind::core_attn:
      return [](const Tensor&) {
        const MemoryContext& ctx = memory_context();
        const std::string module = ctx.module != nullptr ? ctx.module : "";
        const std::string op = ctx.op != nullptr ? ctx.op : "";
        const bool attn = module.size() >= 4 && module.compare(module.size() - 4, 4, "attn") == 0;
        return attn && (op == "matmul" || op == "scaled_masked_softmax" || op == "dropout" ||
                        op == "scaled_dot_product_attention" || op == "ring_attention" ||
                        op == "context_gather_attention" || op == "context_all_gather");
      };
    case OffloadPolicyKind::min_bytes: break;
  }
  const int64_t min_bytes = policy.min_bytes;
  return [min_bytes](const Tensor& t) { return t.storage()->nbytes() >= min_bytes; };
}

}  // namespace tidal::memory
