#pragma once
// Helpers shared by the op families: argument checks with the op's name, and autograd plumbing.
#include "tidal/autograd/node.h"
#include "tidal/autograd/saved_tensor.h"
#include "tidal/memory_scope.h"
#include "tidal/tensor.h"

namespace tidal {
class Kernels;
}  // namespace tidal

namespace tidal::detail {

// Both tensors on one device and of one dtype.
void check_same(const char* op, const Tensor& a, const Tensor& b);
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_floating(const char* op, const Tensor& t);
void check_defined(const char* op, const Tensor& t, const char* what);
void check_dim(const char* op, const Tensor& t, int ndim, const char* what);

// The value of a one-element floating tensor, read through its device's kernels (a meta tensor's
// cost kernels answer a stand-in 0: backend/meta/cost_kernels.cpp).
double scalar_value(Kernels& kern, const Tensor& t);

}  // namespace tidal::detail
