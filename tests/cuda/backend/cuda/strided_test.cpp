// The view every CUDA elementwise kernel indexes with (backend/cuda/strided.h, made by tensor_args.h):
// offset(i) must find element i of the broadcast, row-major output order — checked here on cpu tensors,
// without a GPU, against the CPU's own strided copy. Runs in CI.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

// A tensor whose every element holds its own storage index.
Tensor indices(int64_t n) { return arange(0, n, 1, DType::f64); }

// For each i: the storage index Strided says, against the one the CPU's contiguous copy reads.
void expect_offsets(const Tensor& view, const Shape& out_shape, const std::string& what) {
  const cuda::Strided s = cuda::strided_view(view, out_shape);
  const std::vector<double> want = view.expand(out_shape).contiguous().to_vector<double>();
  ASSERT_LE(s.ndim, cuda::kMaxDims) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(double(view.offset() + s.offset(int64_t(i))), want[i]) << what << ": element " << i;
}

TEST(CudaStrided, ContiguousViewsMergeIntoOneDim) {
  const Tensor x = indices(2 * 3 * 4).view({2, 3, 4});
  expect_offsets(x, x.shape(), "contiguous");
  EXPECT_EQ(cuda::strided_view(x, x.shape()).ndim, 1);
}

TEST(CudaStrided, TransposedNarrowedAndSelectedViews) {
  const Tensor x = indices(5 * 6 * 7).view({5, 6, 7});
  expect_offsets(x.transpose(0, 2), x.transpose(0, 2).shape(), "transpose(0, 2)");
  expect_offsets(x.permute({1, 2, 0}), x.permute({1, 2, 0}).shape(), "permute(1, 2, 0)");
  expect_offsets(x.narrow(1, 2, 3), x.narrow(1, 2, 3).shape(), "narrow(1, 2, 3)");
  expect_offsets(x.select(2, 4), x.select(2, 4).shape(), "select(2, 4)");
  const Tensor t = x.narrow(2, 1, 5).transpose(1, 2);
  expect_offsets(t, t.shape(), "narrow then transpose");
}

TEST(CudaStrided, BroadcastAcrossLeadingMiddleAndTrailingDims) {
  const Tensor row = indices(7).view({7});
  expect_offsets(row, {5, 6, 7}, "a row over two leading dims");
  const Tensor col = indices(6).view({6, 1});
  expect_offsets(col, {5, 6, 7}, "a column over the last dim");
  const Tensor mid = indices(5 * 7).view({5, 1, 7});
  expect_offsets(mid, {5, 6, 7}, "a size-1 middle dim");
  const Tensor scalar = indices(1).view({1});
  expect_offsets(scalar, {3, 4}, "one element everywhere");
  expect_offsets(indices(6).view({6, 1}).transpose(0, 1), {4, 1, 6}, "a transposed row with a size-1 dim");
}

TEST(CudaStrided, EightDimsThatDoNotMergeFit) {
  Tensor x = indices(2 * 2 * 2 * 2 * 2 * 2 * 2 * 2).view({2, 2, 2, 2, 2, 2, 2, 2});
  x = x.permute({7, 6, 5, 4, 3, 2, 1, 0});  // no two neighbours mergeable
  expect_offsets(x, x.shape(), "eight reversed dims");
  EXPECT_EQ(cuda::strided_view(x, x.shape()).ndim, 8);
}

}  // namespace
}  // namespace tidal
