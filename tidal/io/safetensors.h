#pragma once
// The safetensors format (Hugging Face): an 8-byte little-endian header length, a JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the raw
// little-endian tensor data. Checkpoints of the ecosystem load; ours load in the ecosystem.
#include <map>
#include <string>

#include "tidal/tensor.h"

namespace tidal::io {

struct Safetensors {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Reads every tensor (dtypes F32, BF16, F16 (converted to f32), F64, I64, I32, U8, BOOL). Throws
// tidal::Error naming the file and what is wrong for a truncated or malformed file.
Safetensors load_safetensors(const std::string& path);
// Writes atomically (io/atomic_file.h). Tensors are written contiguous, in name order.
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace tidal::io
