#pragma once
// Packed documents on the device (seam/kernel_args.h DocumentMask): query row i of sample b sees no key
// before key start[b * stride_b + i * stride_t] - key_offset. start (device memory) null: no documents.
// A plain struct the launchers take and the kernels read (attention_mask.cuh visible_span).
#include <cstdint>

namespace tidal::cuda {

struct DocSpan {
  const int32_t* start = nullptr;
  int64_t stride_b = 0, stride_t = 0, key_offset = 0;
};

}  // namespace tidal::cuda
