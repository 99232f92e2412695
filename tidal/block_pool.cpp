#include "tidal/block_pool.h"

#include <iterator>

#include "tidal/base/error.h"

namespace tidal {

BlockPool::BlockPool(void* base, int64_t bytes) : base_(static_cast<char*>(base)), bytes_(bytes), free_bytes_(bytes) {
  TIDAL_ASSERT(bytes > 0);
  free_.emplace(0, bytes);
}

void* BlockPool::take(int64_t bytes) {
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const auto [offset, length] = *it;
    if (length < bytes) continue;
    free_.erase(it);
    if (length > bytes) free_.emplace(offset + bytes, length - bytes);
    free_bytes_ -= bytes;
    return base_ + offset;
  }
  return nullptr;
}

void BlockPool::give(void* ptr, int64_t bytes) {
  TIDAL_ASSERT(owns(ptr), "a block given back to a pool it was not carved from");
  int64_t offset = static_cast<char*>(ptr) - base_;
  int64_t length = bytes;
  auto next = free_.lower_bound(offset);
  TIDAL_ASSERT(next == free_.end() || next->first >= offset + length, "a pool block given back twice");
  if (next != free_.end() && next->first == offset + length) {  // merge with the range after
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {  // merge with the range before
    auto prev = std::prev(next);
    TIDAL_ASSERT(prev->first + prev->second <= offset, "a pool block given back twice");
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      length += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(offset, length);
  free_bytes_ += bytes;
}

bool BlockPool::owns(const void* ptr) const {
  const char* p = static_cast<const char*>(ptr);
  return p >= base_ && p < base_ + bytes_;
}

}  // namespace tidal
