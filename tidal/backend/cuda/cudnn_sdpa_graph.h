#pragma once
// The operation graphs of cuDNN's fused attention (scaled dot-product attention, SDPA), forward and
// backward, as cuDNN 9's runtime fusion engines recognize them: products, scale, causal mask,
// softmax with its log-sum-exp statistics, and for the backward the deterministic form (dQ written by
// its product, with no float-atomic accumulation). Plain descriptors: building one needs no GPU
// (tests/cuda/cudnn_sdpa_graph_test.cpp finalizes every descriptor on machines without one).
#include <vector>

#include "tidal/backend/cuda/cudnn_graph.h"

namespace tidal::cuda::cudnn {

// The ids of the tensors the caller binds at execution.
enum SdpaUid : int64_t {
  kSdpaQ = 1,
  kSdpaK,
  kSdpaV,
  kSdpaO,
  kSdpaStats,   // log-sum-exp of each query row's scaled scores, f32 (B, Hq, T, 1) contiguous
  kSdpaScale,   // by value, f32
  kSdpaNegInf,  // by value, f32: what the causal mask puts in masked scores
  kSdpaOne,     // by value, f32
  kSdpaDout,
  kSdpaDq,
  kSdpaDk,
  kSdpaDv,
  kSdpaSoftmaxSum,  // backward scratch: rowsum(dO * O), f32 (B, Hq, T, 1) contiguous
};

// What a graph is built for: sizes and every bound tensor's element strides, (B, H, L, D) order.
// bf16 inputs and outputs; one head dim d for q, k and v; causal means key j <= query i (T == S).
struct SdpaShape {
  int64_t b = 0, hq = 0, hk = 0, t = 0, s = 0, d = 0;
  bool causal = false;
  Dims q{}, k{}, v{}, o{};
  Dims dout{}, dq{}, dk{}, dv{};  // backward only
  // The plan cache's key (forward: without the backward's strides).
  std::vector<int64_t> key(bool backward) const;
};

Graph sdpa_forward_graph(const SdpaShape& s);
Graph sdpa_backward_graph(const SdpaShape& s);

}  // namespace tidal::cuda::cudnn
