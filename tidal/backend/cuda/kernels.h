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

  // --- indexing and MoE routing, the optimizer: index.cpp, optim.cpp
  // (index and optimizer section)
  // losses (loss.cpp, chunked_loss.cpp)
  int64_t find_bad_target(Stream& stream, const Tensor& targets, const CrossEntropyArgs& a) override;
  CrossEntropySums cross_entropy_forward(Stream& stream, const Tensor& loss, const Tensor& lse, const Tensor& logits,
                                         const Tensor& targets, const CrossEntropyArgs& a) override;
  void cross_entropy_backward(Stream& stream, const Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                              const Tensor& targets, const Tensor& row_grad, double scale,
                              const CrossEntropyArgs& a) override;
  int64_t count_not_ignored(Stream& stream, const Tensor& targets, int64_t ignore_index) override;
  double chunked_lm_loss_forward(Stream& stream, const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                                 const Tensor& logits, const Tensor& row_loss, const Tensor& grad_hidden,
                                 const Tensor& grad_weight, const ChunkedLossArgs& a) override;
  // indexing and MoE routing (index.cpp)
  void gather(Stream& stream, const Tensor& out, const Tensor& x, const Tensor& index, int dim) override;
  void scatter_add(Stream& stream, const Tensor& out, const Tensor& src, const Tensor& index, int dim) override;
  int64_t first_out_of_range(Stream& stream, const Tensor& index, int64_t limit) override;
  int64_t index_max(Stream& stream, const Tensor& index, int64_t* min_out) override;
  void topk(Stream& stream, const Tensor& values, const Tensor& indices, const Tensor& x, int dim, int64_t k,
            bool largest, bool sorted) override;
  void argsort(Stream& stream, const Tensor& indices, const Tensor& x, int dim, bool descending) override;
  void bincount(Stream& stream, const Tensor& counts, const Tensor& index) override;
  // the optimizer (optim.cpp)
  void sum_of_squares(Stream& stream, const Tensor& x, int64_t chunk, double* partials) override;
  void adamw_step(Stream& stream, const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const Tensor& master, const AdamWArgs& a) override;
};

}  // namespace tidal::cuda
