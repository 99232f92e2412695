// cuDNN's backend descriptors and the graph pieces of cudnn_graph.h.
#include "tidal/backend/cuda/cudnn_graph.h"

#include <algorithm>

#include "tidal/base/error.h"

namespace tidal::cuda::cudnn {

std::string status_message(cudnnStatus_t status, const char* call) {
  char last[1024] = {};
  cudnnGetLastErrorString(last, sizeof last);
  return detail::str_cat(call, ": ", cudnnGetErrorString(status), last[0] != '\0' ? " (" : "", last,
                         last[0] != '\0' ? ")" : "");
}

void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line) {
  detail::throw_error(detail::str_cat("[cuda] cuDNN ", status_message(status, call), " at ", file, ":", line));
}

Desc::Desc(cudnnBackendDescriptorType_t type) { TIDAL_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }

Desc& Desc::operator=(Desc&& o) noexcept {
  if (this != &o) {
    if (d_ != nullptr) (void)cudnnBackendDestroyDescriptor(d_);
    d_ = o.d_;
    o.d_ = nullptr;
  }
  return *this;
}

Desc::~Desc() {
  if (d_ != nullptr) (void)cudnnBackendDestroyDescriptor(d_);
}

void Desc::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values,
               const char* what) {
  const cudnnStatus_t s = cudnnBackendSetAttribute(d_, name, type, count, values);
  if (s != CUDNN_STATUS_SUCCESS)
    detail::throw_error(
        detail::str_cat("[cuda] cuDNN ", status_message(s, "cudnnBackendSetAttribute"), " setting ", what));
}

void Desc::set_desc(cudnnBackendAttributeName_t name, const Desc& value, const char* what) {
  cudnnBackendDescriptor_t raw = value.get();
  set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw, what);
}

void Desc::finalize(const char* what) {
  const cudnnStatus_t s = cudnnBackendFinalize(d_);
  if (s != CUDNN_STATUS_SUCCESS)
    detail::throw_error(detail::str_cat("[cuda] cuDNN ", status_message(s, "cudnnBackendFinalize"), " of ", what));
}

Dims contiguous_strides(const Dims& dims) {
  Dims s{};
  int64_t n = 1;
  for (int i = 3; i >= 0; --i) {
    s[size_t(i)] = n;
    n *= std::max<int64_t>(dims[size_t(i)], 1);
  }
  return s;
}

GraphTensor& Graph::add(int64_t uid, cudnnDataType_t type, const Dims& dims, const Dims& strides, bool is_virtual,
                        bool by_value) {
  GraphTensor& t = tensors_.emplace_back();
  t.uid = uid;
  t.dims = dims;
  t.strides = strides;
  t.type = type;
  t.is_virtual = is_virtual;
  t.by_value = by_value;
  t.desc = Desc(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t alignment = 16;
  const bool v = is_virtual, bv = by_value;
  t.desc.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t.type, "a tensor's data type");
  t.desc.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t.dims.data(), "a tensor's dimensions");
  t.desc.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t.strides.data(), "a tensor's strides");
  t.desc.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid, "a tensor's id");
  t.desc.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "a tensor's alignment");
  t.desc.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v, "a tensor's virtual flag");
  if (by_value) t.desc.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &bv, "a scalar's by-value flag");
  t.desc.finalize(detail::str_cat("tensor ", uid).c_str());
  return t;
}

const GraphTensor& Graph::io(int64_t uid, cudnnDataType_t type, const Dims& dims, const Dims& strides) {
  TIDAL_ASSERT(uid > 0 && uid < kFirstVirtualUid, "cuDNN io tensor id ", uid);
  return add(uid, type, dims, strides, false, false);
}

const GraphTensor& Graph::scalar(int64_t uid, cudnnDataType_t type) {
  TIDAL_ASSERT(uid > 0 && uid < kFirstVirtualUid, "cuDNN scalar id ", uid);
  return add(uid, type, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
}

const GraphTensor& Graph::virt(cudnnDataType_t type, const Dims& dims, const Dims& strides) {
  return add(next_uid_++, type, dims, strides, true, false);
}

void Graph::pointwise(cudnnPointwiseMode_t mode, const GraphTensor& x, const GraphTensor* b, const GraphTensor* t,
                      const GraphTensor& y, cudnnDataType_t compute, int64_t axis) {
  Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "a pointwise mode");
  pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute, "a pointwise precision");
  if (mode == CUDNN_POINTWISE_GEN_INDEX) pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "an index axis");
  pw.finalize("a pointwise descriptor");
  Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, "a pointwise operation's mode");
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x.desc, "a pointwise input");
  if (b != nullptr) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b->desc, "a pointwise second input");
  if (t != nullptr) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t->desc, "a pointwise condition");
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y.desc, "a pointwise output");
  const float one = 1.0f;
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, "alpha1");
  if (b != nullptr) op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, "alpha2");
  op.finalize(detail::str_cat("pointwise mode ", int(mode), " into tensor ", y.uid).c_str());
  ops_.push_back(std::move(op));
}

const GraphTensor& Graph::unary(cudnnPointwiseMode_t mode, const GraphTensor& x, cudnnDataType_t type) {
  const GraphTensor& y = virt(type, x.dims);
  pointwise(mode, x, nullptr, nullptr, y);
  return y;
}

const GraphTensor& Graph::binary(cudnnPointwiseMode_t mode, const GraphTensor& x, const GraphTensor& b,
                                 cudnnDataType_t type) {
  Dims d{};
  for (size_t i = 0; i < 4; ++i) d[i] = std::max(x.dims[i], b.dims[i]);
  const GraphTensor& y = virt(type, d);
  pointwise(mode, x, &b, nullptr, y);
  return y;
}

void Graph::matmul(const GraphTensor& a, const GraphTensor& b, const GraphTensor& c) {
  Desc mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "a matmul's compute type");
  mm.finalize("a matmul descriptor");
  Desc op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a.desc, "a matmul's A");
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b.desc, "a matmul's B");
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c.desc, "a matmul's C");
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm, "a matmul's descriptor");
  op.finalize(detail::str_cat("matmul into tensor ", c.uid).c_str());
  ops_.push_back(std::move(op));
}

void Graph::reduction(cudnnReduceTensorOp_t reduce, const GraphTensor& x, const GraphTensor& y) {
  Desc r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  r.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "a reduction's compute type");
  r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce, "a reduction's operator");
  r.finalize("a reduction descriptor");
  Desc op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r, "a reduction's descriptor");
  op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x.desc, "a reduction's input");
  op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y.desc, "a reduction's output");
  op.finalize(detail::str_cat("reduction into tensor ", y.uid).c_str());
  ops_.push_back(std::move(op));
}

void Graph::reshape(const GraphTensor& x, const GraphTensor& y) {
  Desc op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x.desc, "a reshape's input");
  op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y.desc, "a reshape's output");
  op.finalize(detail::str_cat("reshape into tensor ", y.uid).c_str());
  ops_.push_back(std::move(op));
}

}  // namespace tidal::cuda::cudnn
