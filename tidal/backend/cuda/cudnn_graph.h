#pragma once
// cuDNN 9's backend graph API (cudnn_graph.h) in small checked pieces: descriptors owned by RAII
// handles, tensors described once, and the four operation kinds the fused attention graphs use
// (pointwise, matmul, reduction, reshape). Building a graph needs no GPU (tests/cuda checks every
// descriptor of the attention graphs on machines without one); only an operation graph, which names
// a cudnnHandle_t, does (cudnn_sdpa.cpp).
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace tidal::cuda::cudnn {

// cuDNN's error with the call, where it was made, and cuDNN's own last message.
[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line);
// The same as a string (plans that fail to build are reported, not thrown).
std::string status_message(cudnnStatus_t status, const char* call);

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type);
  Desc(Desc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Desc& operator=(Desc&& o) noexcept;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc();

  cudnnBackendDescriptor_t get() const { return d_; }
  // Throws with `what` on a refused attribute.
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values,
           const char* what);
  void set_desc(cudnnBackendAttributeName_t name, const Desc& value, const char* what);
  void finalize(const char* what);

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::array<int64_t, 4>;
Dims contiguous_strides(const Dims& dims);

// A tensor of a graph: its unique id, shape and finalized descriptor.
struct GraphTensor {
  int64_t uid = 0;
  Dims dims{}, strides{};
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  bool is_virtual = false, by_value = false;
  Desc desc;
};

// The operations of one graph, in order, and the tensors they connect (stable addresses).
class Graph {
 public:
  // A tensor whose memory the caller passes at execution (uid chosen by the caller, < kFirstVirtualUid).
  const GraphTensor& io(int64_t uid, cudnnDataType_t type, const Dims& dims, const Dims& strides);
  // A (1, 1, 1, 1) scalar passed by value at execution.
  const GraphTensor& scalar(int64_t uid, cudnnDataType_t type);
  // An intermediate that never reaches memory.
  const GraphTensor& virt(cudnnDataType_t type, const Dims& dims, const Dims& strides);
  const GraphTensor& virt(cudnnDataType_t type, const Dims& dims) { return virt(type, dims, contiguous_strides(dims)); }

  // y = op(x[, b[, t]]); `axis` for GEN_INDEX. The compute type is f32 unless given.
  void pointwise(cudnnPointwiseMode_t mode, const GraphTensor& x, const GraphTensor* b, const GraphTensor* t,
                 const GraphTensor& y, cudnnDataType_t compute = CUDNN_DATA_FLOAT, int64_t axis = -1);
  // A new virtual y of x's (broadcast with b's) dims and the given type.
  const GraphTensor& unary(cudnnPointwiseMode_t mode, const GraphTensor& x, cudnnDataType_t type = CUDNN_DATA_FLOAT);
  const GraphTensor& binary(cudnnPointwiseMode_t mode, const GraphTensor& x, const GraphTensor& b,
                            cudnnDataType_t type = CUDNN_DATA_FLOAT);
  // c = a @ b over the last two dims, batched over the first two (f32 accumulation).
  void matmul(const GraphTensor& a, const GraphTensor& b, const GraphTensor& c);
  // y = reduce(x) over the dims where y has 1 (or fewer, for a head reduction).
  void reduction(cudnnReduceTensorOp_t op, const GraphTensor& x, const GraphTensor& y);
  // y: x's elements seen with y's dims and strides.
  void reshape(const GraphTensor& x, const GraphTensor& y);

  const std::vector<Desc>& ops() const { return ops_; }
  size_t tensor_count() const { return tensors_.size(); }

  static constexpr int64_t kFirstVirtualUid = 1000;

 private:
  GraphTensor& add(int64_t uid, cudnnDataType_t type, const Dims& dims, const Dims& strides, bool is_virtual,
                   bool by_value);
  std::deque<GraphTensor> tensors_;
  std::vector<Desc> ops_;
  int64_t next_uid_ = kFirstVirtualUid;
};

}  // namespace tidal::cuda::cudnn

#define TIDAL_CUDNN_CHECK(call)                                                                \
  do {                                                                                         \
    const cudnnStatus_t tidal_cudnn_status_ = (call);                                          \
    if (tidal_cudnn_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                              \
      ::tidal::cuda::cudnn::throw_cudnn_error(tidal_cudnn_status_, #call, __FILE__, __LINE__); \
  } while (0)
