#pragma once
// Shape and strides: a small inline array of int64 (at most kMaxDims dims), no heap allocation.
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

namespace tidal {

class Shape {
 public:
  static constexpr int kMaxDims = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims) : Shape(std::span<const int64_t>(dims)) {}

  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t& operator[](int i) { return d_[i]; }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  int64_t* begin() { return d_; }
  int64_t* end() { return d_ + n_; }
  int64_t back() const { return d_[n_ - 1]; }
  const int64_t* data() const { return d_; }

  void push_back(int64_t v);
  void insert(int pos, int64_t v);
  void erase(int pos);
  void resize(int n, int64_t fill = 0);
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  // Product of all dims (1 for a scalar).
  int64_t numel() const;
  std::string str() const;  // "(2, 3, 4)"

  friend bool operator==(const Shape& a, const Shape& b);

 private:
  int64_t d_[kMaxDims] = {};
  int n_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

// Row-major strides for `shape`.
Shape contiguous_strides(const Shape& shape);
// Wraps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
int normalize_dim(int64_t dim, int ndim, const char* op);
// The shape two operands broadcast to (NumPy rules); throws naming `op` when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace tidal
