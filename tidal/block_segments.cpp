#include "tidal/block_segments.h"

#include <iterator>

#include "tidal/base/error.h"

namespace tidal {

void BlockSegments::add(void* base, int64_t bytes) {
  const char* b = static_cast<const char*>(base);
  TIDAL_ASSERT(bytes > 0 && segments_.count(b) == 0, "a segment added twice");
  segments_.emplace(b, bytes);
  blocks_.emplace(b, Block{bytes, b, false});
}

bool BlockSegments::whole_free_segment(const void* ptr) const {
  const auto it = blocks_.find(static_cast<const char*>(ptr));
  TIDAL_ASSERT(it != blocks_.end(), "a block no segment holds");
  return it->second.free && it->first == it->second.segment && it->second.bytes == segments_.at(it->first);
}

void BlockSegments::take(void* ptr) {
  const auto it = blocks_.find(static_cast<const char*>(ptr));
  TIDAL_ASSERT(it != blocks_.end() && it->second.free, "a segment's block taken while not free");
  it->second.free = false;
}

void* BlockSegments::split(void* ptr, int64_t keep) {
  const auto it = blocks_.find(static_cast<const char*>(ptr));
  TIDAL_ASSERT(it != blocks_.end() && !it->second.free && keep > 0 && keep < it->second.bytes,
               "a segment's block split wrongly");
  const char* rest = it->first + keep;
  blocks_.emplace_hint(std::next(it), rest, Block{it->second.bytes - keep, it->second.segment, true});
  it->second.bytes = keep;
  return const_cast<char*>(rest);
}

BlockSegments::Freed BlockSegments::free(void* ptr) {
  auto it = blocks_.find(static_cast<const char*>(ptr));
  TIDAL_ASSERT(it != blocks_.end() && !it->second.free, "a segment's block freed while not live");
  it->second.free = true;
  Freed out{ptr, it->second.bytes};
  const auto next = std::next(it);
  if (next != blocks_.end() && next->second.free && next->second.segment == it->second.segment) {
    out.after = const_cast<char*>(next->first);
    out.after_bytes = next->second.bytes;
    it->second.bytes += next->second.bytes;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    const auto prev = std::prev(it);
    if (prev->second.free && prev->second.segment == it->second.segment) {
      out.before = const_cast<char*>(prev->first);
      out.before_bytes = prev->second.bytes;
      prev->second.bytes += it->second.bytes;
      blocks_.erase(it);
      it = prev;
    }
  }
  out.ptr = const_cast<char*>(it->first);
  out.bytes = it->second.bytes;
  return out;
}

int64_t BlockSegments::remove(void* ptr) {
  TIDAL_ASSERT(whole_free_segment(ptr), "a segment given back while some of its blocks are live");
  const char* b = static_cast<const char*>(ptr);
  const int64_t bytes = segments_.at(b);
  segments_.erase(b);
  blocks_.erase(b);
  return bytes;
}

}  // namespace tidal
