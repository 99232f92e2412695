#pragma once
// The CUDA backend's kernels (seam/kernels.h), brought up family by family: each family's methods are
// declared in its section below and defined in its .cpp, which checks the tensors and calls the
// launchers its .cu defines (plain arguments: pointers, sizes, strides, the cudaStream_t); a kernel not
// declared here throws "no cuda kernel for <name>" (tests/unit/seam/missing_kernels_test.cpp lists
// them). Every kernel queues on the stream it is given (stream.h stream_handle); one that returns a
// value to the host synchronizes that stream first. Deterministic: no floating-point atomics whose
// order changes a result, so a recompute or an N-rank run gives the same bits as the plain run.
#include <string>

#include "tidal/seam/kernels.h"

namespace tidal::cuda {

class CudaKernels final : public Kernels {
 public:
  const char* name() const override { return "cuda"; }
  std::string describe() const override;  // kernels.cpp

  // --- host transfers: kernels.cpp
  void copy_from_host(Stream& stream, const Tensor& dst, const void* src) override;
  void copy_to_host(Stream& stream, void* dst, const Tensor& src) override;

  // --- elementwise, random, activations: elementwise.cpp, random.cpp, activation.cpp
  // (elementwise section)
  void fill(Stream& stream, const Tensor& dst, double value) override;

  // --- reductions, softmax, norms, RoPE, embedding, losses: reduce.cpp, softmax.cpp, norm.cpp, rope.cpp,
  // embedding.cpp, loss.cpp, chunked_loss.cpp
  // (reduction section)

  // --- matrix products (cuBLASLt) and attention (cuDNN SDPA, eager fallback): matmul.cpp, attention.cpp
  // (matmul and attention section)
  bool matmul_operand_ok(int64_t rows, int64_t cols, int64_t stride_r, int64_t stride_c) const override;
  void matmul(Stream& stream, const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) override;
  int64_t flash_forward_workspace(const Tensor& q, const Tensor& k, const Tensor& v) const override;
  int64_t flash_backward_workspace(const Tensor& dq, const Tensor& q, const Tensor& k, const Tensor& v) const override;
  void flash_attention_forward(Stream& stream, const FlashArgs& a, const Tensor& out, const Tensor& lse,
                               const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& workspace) override;
  void flash_attention_backward(Stream& stream, const FlashArgs& a, const Tensor& dq, const Tensor& dk,
                                const Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse, const Tensor& workspace) override;

  // --- indexing and MoE routing, the optimizer: index.cpp, optim.cpp
  // (index and optimizer section)
};

}  // namespace tidal::cuda
