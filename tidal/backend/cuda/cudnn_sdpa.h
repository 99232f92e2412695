#pragma once
// cuDNN's fused attention (SDPA) behind the CUDA backend's flash_attention_* (attention.cpp picks it
// where it applies, else the eager path): plans built once per shape and layout, deterministic
// engines only, failures reported once and answered by the eager path.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "tidal/seam/kernel_args.h"

namespace tidal {
class Tensor;
}

namespace tidal::cuda {

// Empty when the fused kernels take these inputs, else why not (host-side facts only: dtype, dropout,
// head dims, mask, strides and alignment; no GPU needed). bf16 only (cuDNN's fused attention has no f32
// or f64), no dropout (tidal's Philox mask, the CPU's bit for bit, is the eager path's: cuDNN draws its
// own), d == dv, a multiple of 8 up to 128, causal only for T == S (cuDNN's top-left diagonal is then
// tidal's bottom-right one), no compressed keys or log-sum-exp gradient (FlashArgs::key_rate, lse_grad:
// DeepSeek-V4's attention), every tensor's last dim contiguous, other strides multiples of 8, 16-byte aligned.
std::string sdpa_refusal(const FlashArgs& cfg, const Tensor& q, const Tensor& k, const Tensor& v);

// The workspace, in f32 elements, the fused backward is planned with: its row sums and the engine's dP
// buffer (B * Hq * T * S bf16, rounded up to 64-row tiles), under GQA an f32 (B, Hq, S, D) buffer, plus
// 64 elements (cudnn_sdpa.cpp says where these come from). The plan is the first
// deterministic engine whose workspace fits; where none does, the first one's gets a temporary of its
// own, which dry runs do not count (said once on stderr).
int64_t sdpa_backward_workspace(const Tensor& q, const Tensor& k);

// Queue the fused forward or backward on `stream`; false (nothing queued) when the tensors' layout is
// refused or cuDNN has no deterministic plan for them (said once per shape on stderr, with cuDNN's
// reason). `lse` (B, Hq, T) f32 contiguous, or undefined in a forward without gradients; an undefined
// gradient is computed into a temporary.
bool sdpa_forward(cudaStream_t stream, const FlashArgs& cfg, const Tensor& out, const Tensor& lse, const Tensor& q,
                  const Tensor& k, const Tensor& v, const Tensor& workspace);
bool sdpa_backward(cudaStream_t stream, const FlashArgs& cfg, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                   const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, const Tensor& workspace);

// "cudnn" when the last fused call for these inputs ran cuDNN, else why it did not (tests and the proof
// script check that the fused path is the one that ran).
std::string sdpa_last_path();

}  // namespace tidal::cuda
