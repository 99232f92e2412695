#include "tidal/allocator_streams.h"

#include "tidal/base/error.h"
#include "tidal/seam/runtime.h"

namespace tidal {

void add_stream_event(std::vector<StreamEvent>& events, StreamEvent e) {
  for (StreamEvent& old : events)
    if (old.stream == e.stream) {
      old.event = std::move(e.event);
      return;
    }
  events.push_back(std::move(e));
}

namespace {

bool has_event_of(const std::vector<StreamEvent>* events, const detail::StreamImpl* stream) {
  if (events == nullptr) return false;
  for (const StreamEvent& e : *events)
    if (e.stream == stream) return true;
  return false;
}

}  // namespace

bool needs_wait(const FreeBlock& block, const std::vector<StreamEvent>* events, const detail::StreamImpl* to) {
  if (block.freed_on != nullptr && block.freed_on != to) return true;
  if (events != nullptr)
    for (const StreamEvent& e : *events)
      if (e.stream != to) return true;
  return false;
}

ReuseWaits reuse_waits(const FreeBlock& block, const std::vector<StreamEvent>* events, const detail::StreamImpl* to) {
  ReuseWaits w;
  if (events != nullptr)
    for (const StreamEvent& e : *events)
      if (e.stream != to) w.events.push_back(e.event);
  if (block.freed_on != nullptr && block.freed_on != to && !has_event_of(events, block.freed_on)) {
    // Only a compute stream's frees record nothing (Note [Cross-stream reuse]): it lives until exit.
    TIDAL_ASSERT(block.freed_on->is_compute(), "a block freed on a side stream has no event of that stream");
    w.record_on = block.freed_on;
  }
  return w;
}

void order_after(detail::StreamImpl& to, const ReuseWaits& waits) {
  if (waits.record_on != nullptr) to.wait(waits.record_on->record());
  for (const std::shared_ptr<detail::EventState>& e : waits.events) to.wait(e);
}

}  // namespace tidal
