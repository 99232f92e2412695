#pragma once
// Bytes from an allocator, with a memory category. A Storage can release its bytes but keep its
// identity, and rematerialize in place later (same object, new bytes): output-discarding recompute
// and offload rely on this, because every tensor that refers to the Storage stays valid.
#include <cstdint>
#include <memory>

#include "tidal/allocator.h"
#include "tidal/device.h"
#include "tidal/memory_stats.h"

namespace tidal {

class Storage {
 public:
  // Allocates nbytes from `allocator`. The category defaults to the current MemoryScope's.
  Storage(int64_t nbytes, Allocator& allocator, MemoryCategory category);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // A storage of the device's allocator, in the current MemoryScope's category.
  static std::shared_ptr<Storage> make(int64_t nbytes, Device device);
  // A storage of `device`'s host allocator (offload target), category host_offload.
  static std::shared_ptr<Storage> make_host(int64_t nbytes, Device device = Device::cpu());

  // nullptr for meta storages and for released ones.
  void* data() const { return allocator_->touches_memory() ? ptr_ : nullptr; }
  int64_t nbytes() const { return nbytes_; }
  Device device() const { return allocator_->device(); }
  Allocator& allocator() const { return *allocator_; }
  bool is_materialized() const { return materialized_; }

  // The category the bytes are accounted in now: activation while saved for backward.
  MemoryCategory category() const;
  MemoryCategory base_category() const { return category_; }
  void set_category(MemoryCategory c);

  // Frees the bytes; the object, its size and category stay. No-op if already released.
  void release();
  // Allocates the bytes again (contents undefined). No-op if materialized.
  void rematerialize();
  // Rematerializes by taking `other`'s bytes (same size and allocator), which leaves `other` released:
  // a recomputed value moves into the original storage without a copy or a second allocation.
  void take_bytes(Storage& other);

  // Autograd marks a storage while a node holds it for backward: temporaries count as activations.
  void mark_saved();
  void unmark_saved();
  int saved_count() const { return saved_count_; }

  // Set by output-discarding recompute on the outputs it will free and recompute: offload skips them
  // (sending away bytes that are about to be freed and rebuilt buys nothing).
  bool will_recompute() const { return will_recompute_; }
  void set_will_recompute() { will_recompute_ = true; }

  // Bumped by every in-place write; saved tensors compare it at unpack.
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

  // A process-unique number (addresses get reused; ids do not).
  uint64_t id() const { return id_; }

  // Where the bytes were first allocated (for the memory report).
  const char* op() const { return op_; }
  int layer() const { return layer_; }

 private:
  Allocator* allocator_;
  void* ptr_ = nullptr;
  int64_t nbytes_;
  MemoryCategory category_;
  bool materialized_ = false;
  int saved_count_ = 0;
  bool will_recompute_ = false;
  uint64_t version_ = 0;
  uint64_t id_;
  const char* op_ = nullptr;
  int layer_ = -1;
};

}  // namespace tidal
