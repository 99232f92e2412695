#pragma once
// The scopes that set the thread's memory context (memory_context.h), attached to every allocation: MemoryScope
// (category), OpScope (op name), LayerScope (layer index), ModuleScope (module name). OpScope is also the profiler's op
// range.
#include "tidal/memory_context.h"
#include "tidal/range_recorder.h"

namespace tidal {

class MemoryScope {
 public:
  explicit MemoryScope(MemoryCategory c) : saved_(memory_context().category) { memory_context().category = c; }
  ~MemoryScope() { memory_context().category = saved_; }
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  MemoryCategory saved_;
};

// Also the profiler's op range (range_recorder.h) of kind `kind`: one flag test when the recorder
// is off. The autograd engine names each node's backward this way (kind profile::kBackward).
class OpScope {
 public:
  explicit OpScope(const char* op, const char* kind = profile::kOp) : saved_(memory_context().op), kind_(kind) {
    memory_context().op = op;
    if (profile::recording() && op != nullptr) t0_ = profile::detail::range_begin();
  }
  ~OpScope() {
    if (t0_ >= 0) profile::detail::range_end(memory_context().op, kind_, t0_);
    memory_context().op = saved_;
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  const char* saved_;
  const char* kind_;
  int64_t t0_ = -1;
};

class LayerScope {
 public:
  explicit LayerScope(int layer) : saved_(memory_context().layer) { memory_context().layer = layer; }
  ~LayerScope() { memory_context().layer = saved_; }
  LayerScope(const LayerScope&) = delete;
  LayerScope& operator=(const LayerScope&) = delete;

 private:
  int saved_;
};

class ModuleScope {
 public:
  explicit ModuleScope(const char* module) : saved_(memory_context().module) { memory_context().module = module; }
  ~ModuleScope() { memory_context().module = saved_; }
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  const char* saved_;
};

}  // namespace tidal
