#include "tidal/shape.h"

#include <algorithm>
#include <ostream>

#include "tidal/base/error.h"

namespace tidal {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  TIDAL_CHECK(dims.size() <= size_t(kMaxDims), "[shape] at most ", kMaxDims, " dims are supported, got ", dims.size());
  n_ = int(dims.size());
  std::copy(dims.begin(), dims.end(), d_);
}

void Shape::push_back(int64_t v) {
  TIDAL_CHECK(n_ < kMaxDims, "[shape] at most ", kMaxDims, " dims are supported");
  d_[n_++] = v;
}

void Shape::insert(int pos, int64_t v) {
  TIDAL_CHECK(n_ < kMaxDims, "[shape] at most ", kMaxDims, " dims are supported");
  TIDAL_ASSERT(pos >= 0 && pos <= n_);
  for (int i = n_; i > pos; --i) d_[i] = d_[i - 1];
  d_[pos] = v;
  ++n_;
}

void Shape::erase(int pos) {
  TIDAL_ASSERT(pos >= 0 && pos < n_);
  for (int i = pos; i + 1 < n_; ++i) d_[i] = d_[i + 1];
  --n_;
}

void Shape::resize(int n, int64_t fill) {
  TIDAL_CHECK(n >= 0 && n <= kMaxDims, "[shape] at most ", kMaxDims, " dims are supported, got ", n);
  for (int i = n_; i < n; ++i) d_[i] = fill;
  n_ = n;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < n_; ++i) n *= d_[i];
  return n;
}

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < n_; ++i) {
    if (i) s += ", ";
    s += std::to_string(d_[i]);
  }
  return s + ")";
}

bool operator==(const Shape& a, const Shape& b) { return a.n_ == b.n_ && std::equal(a.begin(), a.end(), b.begin()); }

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

Shape contiguous_strides(const Shape& shape) {
  Shape st;
  st.resize(shape.size());
  int64_t acc = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return st;
}

int normalize_dim(int64_t dim, int ndim, const char* op) {
  const int64_t lo = -std::max(ndim, 1), hi = std::max(ndim, 1) - 1;
  TIDAL_CHECK(dim >= lo && dim <= hi, "[", op, "] dim ", dim, " is out of range for a tensor with ", ndim,
              " dims (valid: ", lo, " to ", hi, ")");
  return int(dim < 0 ? dim + std::max(ndim, 1) : dim);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int n = std::max(a.size(), b.size());
  Shape out;
  out.resize(n);
  for (int i = 0; i < n; ++i) {
    const int ia = i - (n - a.size()), ib = i - (n - b.size());
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    TIDAL_CHECK(da == db || da == 1 || db == 1, "[", op, "] shapes ", a, " and ", b,
                " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace tidal
