#include "tests/support/gradcheck.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "tidal/autograd/grad_mode.h"
#include "tidal/base/philox.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/reduce.h"

namespace tidal::testing {
namespace {

double weighted_sum(const Tensor& out, const Tensor& w) { return sum(mul(out.to(DType::f64), w)).item<double>(); }

// Storage position of the i-th element (row-major) of t.
int64_t element_offset(const Tensor& t, int64_t i) {
  int64_t off = t.offset();
  for (int d = t.dim() - 1; d >= 0; --d) {
    off += (i % t.shape()[d]) * t.strides()[d];
    i /= t.shape()[d];
  }
  return off;
}

std::string preview(const std::vector<double>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size() && i < 6; ++i) os << (i ? ", " : "") << v[i];
  if (v.size() > 6) os << ", ...";
  os << "]";
  return os.str();
}

}  // namespace

Tensor uniform(const Shape& shape, uint64_t seed, double lo, double hi, bool requires_grad, DType dtype) {
  std::vector<double> v(size_t(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = lo + (hi - lo) * philox_uniform(seed, i);
  Tensor t = from_vector(v, shape, dtype);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

::testing::AssertionResult gradcheck(const Fn& f, const std::vector<Tensor>& inputs, GradcheckOptions opt) {
  for (const Tensor& t : inputs) t.zero_grad();
  Tensor out = f(inputs);
  Tensor w = uniform(out.shape(), 12345, 0.5, 1.5, false);
  Tensor loss = sum(mul(out.to(DType::f64), w));
  loss.backward();
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    TIDAL_CHECK(x.dtype() == DType::f64, "gradcheck needs f64 inputs");
    Tensor g = x.grad();
    std::vector<double> analytic = g.defined() ? g.to_vector<double>() : std::vector<double>(size_t(x.numel()), 0.0);
    std::vector<double> numeric(size_t(x.numel()));
    double* base = static_cast<double*>(x.storage()->data());
    for (int64_t i = 0; i < x.numel(); ++i) {
      double* p = base + element_offset(x, i);
      const double orig = *p;
      NoGradGuard no_grad;
      *p = orig + opt.eps;
      const double up = weighted_sum(f(inputs), w);
      *p = orig - opt.eps;
      const double down = weighted_sum(f(inputs), w);
      *p = orig;
      numeric[size_t(i)] = (up - down) / (2 * opt.eps);
    }
    double worst = -1;
    int64_t worst_i = 0;
    bool ok = true;
    for (size_t i = 0; i < numeric.size(); ++i) {
      const double err = std::abs(analytic[i] - numeric[i]);
      const double tol = opt.atol + opt.rtol * std::abs(numeric[i]);
      if (!(err <= tol)) ok = false;
      if (!(err <= worst) || std::isnan(err)) {
        worst = err;
        worst_i = int64_t(i);
      }
    }
    if (!ok) {
      return ::testing::AssertionFailure()
             << "input " << k << " " << x.shape() << ": worst element " << worst_i << " analytic "
             << analytic[size_t(worst_i)] << " numeric " << numeric[size_t(worst_i)] << " (|diff| " << worst
             << ")\n  analytic " << preview(analytic) << "\n  numeric  " << preview(numeric);
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << "shapes differ: " << a.shape() << " vs " << b.shape();
  std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  double worst = -1;
  size_t wi = 0;
  bool ok = true;
  for (size_t i = 0; i < va.size(); ++i) {
    const double err = std::abs(va[i] - vb[i]);
    if (!(err <= atol + rtol * std::abs(vb[i]))) ok = false;
    if (!(err <= worst) || std::isnan(err)) {
      worst = err;
      wi = i;
    }
  }
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "worst element " << wi << ": " << va[wi] << " vs " << vb[wi] << " (|diff| "
                                       << worst << ")\n  a " << preview(va) << "\n  b " << preview(vb);
}

::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << "differ in shape/dtype: " << a.shape() << " " << a.dtype() << " vs "
                                         << b.shape() << " " << b.dtype();
  Tensor ca = a.contiguous(), cb = b.contiguous();
  const char* pa = static_cast<const char*>(ca.raw_data());
  const char* pb = static_cast<const char*>(cb.raw_data());
  const int64_t item = a.itemsize();
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(pa + i * item, pb + i * item, size_t(item)) != 0) {
      std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
      return ::testing::AssertionFailure() << "first difference at element " << i << ": " << va[size_t(i)] << " vs "
                                           << vb[size_t(i)] << "\n  a " << preview(va) << "\n  b " << preview(vb);
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tidal::testing
