#pragma once
// Block-wide reductions in a fixed tree, shared by the reduction family's .cu files (reduce, softmax,
// norm): a warp reduces with shuffles (lane i takes lane i + 16, + 8, ..., + 1), lane 0 of each warp
// writes its value to shared memory, and every warp reduces those values the same way, so each thread
// gets the same bits and the order depends only on blockDim.x (a multiple of 32, at most 1024).
#include <cuda_runtime.h>

namespace tidal::cuda {

struct SumOp {
  template <class A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return a + b;
  }
};

// max that skips NaN (the CPU's row_max: a NaN never replaces the running max).
struct MaxOp {
  template <class A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return b > a ? b : a;
  }
};

template <class A, class Op>
__device__ __forceinline__ A warp_reduce(A v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
  return v;  // the full result in lane 0
}

// The reduction of every thread's v over the block, returned to all threads. Every thread of the block
// must call it (it synchronizes); consecutive calls may reuse it.
template <class A, class Op>
__device__ __forceinline__ A block_reduce(A v, Op op, A identity) {
  __shared__ A partial[32];
  v = warp_reduce(v, op);
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  __syncthreads();  // an earlier call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? partial[lane] : identity;
  v = warp_reduce(v, op);
  return __shfl_sync(0xffffffffu, v, 0);
}

template <class A>
__device__ __forceinline__ A block_sum(A v) {
  return block_reduce(v, SumOp{}, A(0));
}

}  // namespace tidal::cuda
