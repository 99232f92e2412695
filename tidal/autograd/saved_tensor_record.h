#pragma once
// One row of the saved-tensor table (autograd/saved_tensor_log.h): what the profiler's report and the
// memory summary read, without the log's machinery.
#include <cstdint>
#include <string>

#include "tidal/dtype.h"
#include "tidal/shape.h"

namespace tidal::autograd {

struct SavedTensorRecord {
  int layer = -1;
  std::string module;  // dotted module name, "" outside modules
  std::string op;      // the op that saved it ("linear", "rms_norm", ...)
  Shape shape;
  DType dtype = DType::f32;
  int64_t bytes = 0;     // of its storage; 0 when an earlier record already counted that storage
  std::string policy;    // kept | recomputed | discarded | <hooks' policy>
  std::string category;  // activation, or logits for what the LM head and the loss keep
};

}  // namespace tidal::autograd
