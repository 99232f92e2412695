#pragma once
// The safetensors format (Hugging Face): an 8-byte little-endian header length, a JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the raw
// little-endian tensor data. Checkpoints of the ecosystem load; ours load in the ecosystem.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tidal/tensor.h"

namespace tidal::io {

struct Safetensors {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// The largest header read (safetensors' own limit, 100 MB): checked before the header is allocated.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Reads every tensor (dtypes F32, BF16, F16 (converted to f32), F64, I64, I32, U8, BOOL). The file is
// one from a stranger, so it is checked before its data is read: the header at most kMaxHeaderBytes,
// parsed with parse_json; every entry's dtype known, shape non-negative with dtype x shape = its
// bytes (overflow-checked), and the entries' data_offsets tiling the data section exactly (contiguous
// from 0, no holes, no overlaps, no trailing bytes); __metadata__ an object of strings. Throws
// tidal::Error naming the file and the field; messages never echo the file's contents (tensor names
// are shown cut to 64 characters).
// `keep`, when given: only the tensors it accepts (by name) are read, the others' bytes are skipped
// (the whole header is checked all the same). `rows`, when given and it names a range for a tensor: only rows
// [first, first + count) of its first dimension are read, a (count, ...) tensor (expert parallelism's slabs of
// stacked tensors, nn/slab.h); a range outside the tensor throws naming it.
struct RowRange {
  int64_t first = 0, count = 0;
};
using SelectRows = std::function<std::optional<RowRange>(const std::string&)>;
Safetensors load_safetensors(const std::string& path, const std::function<bool(const std::string&)>& keep = {},
                             const SelectRows& rows = {});
// Writes atomically (io/atomic_file.h). Tensors are written contiguous, in name order.
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// A tensor of a file written one tensor at a time: what the header says before its bytes exist.
struct TensorEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
};
// save_safetensors of tensors produced one at a time: the header from `entries` (names unique, any
// order: written in name order), then `produce(entry)` for each in name order, written and released
// before the next is asked for (expert parallel's checkpoint receives each expert from its rank).
// A produced tensor must have its entry's dtype and shape (an assertion).
void save_safetensors_streamed(const std::string& path, std::vector<TensorEntry> entries,
                               const std::function<Tensor(const TensorEntry&)>& produce,
                               const std::map<std::string, std::string>& metadata = {});

}  // namespace tidal::io
