#include "tidal/storage.h"

#include <atomic>

#include "tidal/memory_scope.h"

namespace tidal {

namespace {
std::atomic<uint64_t> g_next_storage_id{1};
}  // namespace

Storage::Storage(int64_t nbytes, Allocator& allocator, MemoryCategory category)
    : allocator_(&allocator), nbytes_(nbytes), category_(category), id_(g_next_storage_id.fetch_add(1)) {
  TIDAL_ASSERT(nbytes >= 0);
  const MemoryContext& ctx = memory_context();
  op_ = ctx.op;
  layer_ = ctx.layer;
  rematerialize();
}

Storage::~Storage() {
  try {
    release();
  } catch (...) {  // destructors must not throw; release only fails on a broken invariant
  }
}

std::shared_ptr<Storage> Storage::make(int64_t nbytes, Device device) {
  return std::make_shared<Storage>(nbytes, device_allocator(device), memory_context().category);
}

std::shared_ptr<Storage> Storage::make_host(int64_t nbytes, Device device) {
  return std::make_shared<Storage>(nbytes, host_allocator(device), MemoryCategory::host_offload);
}

MemoryCategory Storage::category() const {
  return saved_count_ > 0 && category_ == MemoryCategory::temporary ? MemoryCategory::activation : category_;
}

void Storage::set_category(MemoryCategory c) {
  const MemoryCategory before = category();
  category_ = c;
  if (materialized_) allocator_->recategorize(ptr_, nbytes_, before, category());
}

void Storage::release() {
  if (!materialized_) return;
  allocator_->deallocate(ptr_, nbytes_, category());
  ptr_ = nullptr;
  materialized_ = false;
}

void Storage::rematerialize() {
  if (materialized_) return;
  ptr_ = allocator_->allocate(nbytes_, category());
  materialized_ = true;
}

void Storage::take_bytes(Storage& other) {
  TIDAL_ASSERT(!materialized_ && other.materialized_ && other.nbytes_ == nbytes_ && other.allocator_ == allocator_,
               "take_bytes needs a released storage and a materialized one of the same size and allocator");
  allocator_->recategorize(other.ptr_, nbytes_, other.category(), category());
  ptr_ = other.ptr_;
  materialized_ = true;
  other.ptr_ = nullptr;
  other.materialized_ = false;
}

void Storage::mark_saved() {
  const MemoryCategory before = category();
  ++saved_count_;
  if (materialized_) allocator_->recategorize(ptr_, nbytes_, before, category());
}

void Storage::unmark_saved() {
  TIDAL_ASSERT(saved_count_ > 0);
  const MemoryCategory before = category();
  --saved_count_;
  if (materialized_) allocator_->recategorize(ptr_, nbytes_, before, category());
}

}  // namespace tidal
