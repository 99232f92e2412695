#pragma once
// Thread-local context attached to every allocation: its category, the op and layer that made it.
// Set with RAII scopes: MemoryScope (category), OpScope (op name), LayerScope (layer index),
// ModuleScope (module name).
#include "tidal/memory_stats.h"

namespace tidal {

struct MemoryContext {
  MemoryCategory category = MemoryCategory::temporary;
  const char* op = nullptr;      // static string
  int layer = -1;
  const char* module = nullptr;  // dotted module name ("model.layers.0.mlp.up_proj"), owned by the module
};

MemoryContext& memory_context();

class MemoryScope {
 public:
  explicit MemoryScope(MemoryCategory c) : saved_(memory_context().category) { memory_context().category = c; }
  ~MemoryScope() { memory_context().category = saved_; }
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  MemoryCategory saved_;
};

class OpScope {
 public:
  explicit OpScope(const char* op) : saved_(memory_context().op) { memory_context().op = op; }
  ~OpScope() { memory_context().op = saved_; }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  const char* saved_;
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
