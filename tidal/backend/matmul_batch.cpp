#include "tidal/backend/matmul_batch.h"

#include "tidal/tensor.h"

namespace tidal::backend {

std::vector<int64_t> batch_strides(const Tensor& t, const Shape& batch) {
  std::vector<int64_t> s(size_t(batch.size()), 0);
  const int tb = t.dim() - 2, off = batch.size() - tb;
  for (int d = 0; d < batch.size(); ++d) {
    const int td = d - off;
    s[size_t(d)] = (td < 0 || t.shape()[td] == 1) ? 0 : t.strides()[td];
  }
  return s;
}

bool rows_fold(const Tensor& a, const Shape& batch) {
  if (a.dim() - 2 != batch.size()) return false;
  int64_t expected = a.strides()[a.dim() - 2] * a.shape()[a.dim() - 2];
  for (int d = a.dim() - 3; d >= 0; --d) {
    if (a.shape()[d] != 1 && a.strides()[d] != expected) return false;
    expected *= a.shape()[d];
  }
  return true;
}

}  // namespace tidal::backend
