#pragma once
// The CUDA backend's eager attention (attention.cpp, Note [Eager flash attention on CUDA]): what runs
// where cuDNN's fused kernels do not (cudnn_sdpa.h), and the reference tests/cuda compares them with.
// Arguments as the seam's flash_attention_* (tidal/seam/kernels.h); workspaces in accumulate-type
// elements.
#include <cstdint>

#include "tidal/seam/kernel_args.h"

namespace tidal {
class Stream;
class Tensor;
}  // namespace tidal

namespace tidal::cuda {

int64_t eager_forward_workspace(const Tensor& q, const Tensor& k, const Tensor& v);
int64_t eager_backward_workspace(const Tensor& q, const Tensor& k, const Tensor& v);
void eager_attention_forward(Stream& stream, const FlashArgs& cfg, const Tensor& out, const Tensor& lse,
                             const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& workspace);
void eager_attention_backward(Stream& stream, const FlashArgs& cfg, const Tensor& dq, const Tensor& dk,
                              const Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const Tensor& workspace);

}  // namespace tidal::cuda
