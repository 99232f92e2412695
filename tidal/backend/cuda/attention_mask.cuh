#pragma once
// The attention mask on the device: the keys [first, end) query row i of a (T, S) attention sees
// (seam/kernel_args.h visible_key_range, which the CPU kernels use): all S, or under the
// bottom-right-aligned causal mask the keys up to its diagonal i + S - T + diagonal, and with a
// sliding window W > 0 only the W keys ending there; with compressed keys (FlashArgs::key_rate) the keys
// [0, (i + 1) / key_rate). first == end: none.
#include <cstdint>

#include "tidal/backend/cuda/doc_span.h"

namespace tidal::cuda {

struct KeySpan {
  int64_t first, end;
};

__host__ __device__ __forceinline__ KeySpan visible_span(bool causal, int64_t window, int64_t diagonal, int64_t i,
                                                         int64_t t, int64_t s) {
  if (!causal) return {0, s};
  const int64_t diag = i + s - t + diagonal;
  const int64_t end = diag + 1 < 0 ? 0 : (diag + 1 > s ? s : diag + 1);
  int64_t first = 0;
  if (window > 0) first = diag - window + 1 < 0 ? 0 : (diag - window + 1 > s ? s : diag - window + 1);
  return {first < end ? first : end, end};
}

// With packed documents (doc_span.h) row i of sample b also sees no key before its document's start.
__device__ __forceinline__ KeySpan visible_span(bool causal, int64_t window, int64_t diagonal, const DocSpan& docs,
                                                int64_t b, int64_t i, int64_t t, int64_t s) {
  KeySpan r = visible_span(causal, window, diagonal, i, t, s);
  if (docs.start != nullptr) {
    const int64_t floor = int64_t(docs.start[b * docs.stride_b + i * docs.stride_t]) - docs.key_offset;
    if (floor > r.first) r.first = floor < r.end ? floor : r.end;
  }
  return r;
}

// With compressed keys (FlashArgs::key_rate R > 0: causal, without window, diagonal or documents) key j stands for
// the positions [j R, (j + 1) R) and row i sees it once they are all past: keys [0, (i + 1) / R). Else as above.
__device__ __forceinline__ KeySpan visible_span(int64_t key_rate, bool causal, int64_t window, int64_t diagonal,
                                                const DocSpan& docs, int64_t b, int64_t i, int64_t t, int64_t s) {
  if (key_rate > 0) {
    const int64_t end = (i + 1) / key_rate;
    return {0, end < s ? end : s};
  }
  return visible_span(causal, window, diagonal, docs, b, i, t, s);
}

}  // namespace tidal::cuda
