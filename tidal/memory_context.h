#pragma once
// The calling thread's memory context: what each allocation is charged to (its category, the op and
// layer that made it, the module) and what the range recorder tags each range with. The scopes of
// memory_scope.h set it; it has its own header so that the range recorder, which those scopes use,
// reads it from below them.
#include "tidal/memory_stats.h"

namespace tidal {

struct MemoryContext {
  MemoryCategory category = MemoryCategory::temporary;
  const char* op = nullptr;  // static string
  int layer = -1;
  const char* module = nullptr;  // dotted module name ("model.layers.0.mlp.up_proj"), owned by the module
};

inline MemoryContext& memory_context() {
  thread_local MemoryContext ctx;
  return ctx;
}

}  // namespace tidal
