#include "tidal/ops/documents.h"

#include <algorithm>
#include <type_traits>

#include "tidal/base/error.h"

namespace tidal {

template <class T>
Tensor host_values_on(const std::vector<T>& values, const Shape& shape, Device device) {
  const DType dtype = std::is_same_v<T, int32_t> ? DType::i32 : DType::i64;
  if (device.is_meta()) return empty(shape, dtype, device);
  Tensor host = empty(shape, dtype);
  TIDAL_ASSERT(int64_t(values.size()) == host.numel(), "[host_values_on] ", values.size(), " values for ", shape);
  std::copy(values.begin(), values.end(), host.data<T>());
  return device.is_cpu() ? host : host.to(device);
}
template Tensor host_values_on(const std::vector<int32_t>&, const Shape&, Device);
template Tensor host_values_on(const std::vector<int64_t>&, const Shape&, Device);

namespace {

// The layout of the columns `rows` of host ids (B, T); opens(r, i) says whether token i of row r opens a new
// document (token 0 always does).
template <class Opens>
DocumentLayout layout_where(const Tensor& ids, const std::vector<int64_t>& rows, Device device, const char* what,
                            Opens opens) {
  TIDAL_CHECK(ids.dim() == 2, "[document_layout] ", what, " must be (B, T), got ", ids.shape());
  TIDAL_CHECK(ids.device().is_cpu(), "[document_layout] ", what, " must be on the host, got ", ids.device());
  TIDAL_CHECK(ids.dtype() == DType::i64 || ids.dtype() == DType::i32, "[document_layout] ", what,
              " must be i64 or i32, got ", ids.dtype());
  const int64_t b = ids.size(0), t = ids.size(1), n = rows.empty() ? t : int64_t(rows.size());
  TIDAL_CHECK(t <= int64_t(INT32_MAX), "[document_layout] a row of ", t, " tokens does not fit i32 positions");
  for (int64_t r : rows) TIDAL_CHECK(r >= 0 && r < t, "[document_layout] row ", r, " outside a sequence of ", t);
  const Tensor c = ids.contiguous();
  const auto id = [&c](int64_t k) {
    return c.dtype() == DType::i64 ? c.data<int64_t>()[k] : int64_t(c.data<int32_t>()[k]);
  };
  std::vector<int32_t> starts(size_t(b * n)), positions(size_t(b * n));
  std::vector<int32_t> row_starts(static_cast<size_t>(t));
  for (int64_t r = 0; r < b; ++r) {
    int32_t start = 0;
    for (int64_t i = 0; i < t; ++i) {
      if (i > 0 && opens(id, r * t, i)) start = int32_t(i);
      row_starts[size_t(i)] = start;
    }
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = rows.empty() ? k : rows[size_t(k)];
      starts[size_t(r * n + k)] = row_starts[size_t(i)];
      positions[size_t(r * n + k)] = int32_t(i) - row_starts[size_t(i)];
    }
  }
  return {host_values_on(starts, {b, n}, device), host_values_on(positions, {b, n}, device)};
}

}  // namespace

DocumentLayout document_layout(const Tensor& ids, int64_t eod, const std::vector<int64_t>& rows, Device device) {
  // The token after an EOD opens a document.
  return layout_where(ids, rows, device, "ids",
                      [eod](const auto& id, int64_t row, int64_t i) { return id(row + i - 1) == eod; });
}

DocumentLayout sample_document_layout(const Tensor& samples, const std::vector<int64_t>& rows, Device device) {
  return layout_where(samples, rows, device, "sample indices",
                      [](const auto& id, int64_t row, int64_t i) { return id(row + i) != id(row + i - 1); });
}

DocumentMask document_mask(const Tensor& documents, int64_t key_offset) {
  DocumentMask m;
  if (!documents.defined() || documents.is_meta()) return m;
  m.start = documents.data<int32_t>();
  m.stride_b = documents.stride(0);
  m.stride_t = documents.stride(1);
  m.key_offset = key_offset;
  return m;
}

void check_documents(const char* op, const Tensor& documents, int64_t key_offset, int64_t batch, int64_t rows,
                     const Tensor& like) {
  if (!documents.defined()) return;
  TIDAL_CHECK(documents.dim() == 2 && documents.size(0) == batch && documents.size(1) == rows, "[", op,
              "] documents must be (B, T) = (", batch, ", ", rows, ") for the query rows, got ", documents.shape());
  TIDAL_CHECK(documents.dtype() == DType::i32, "[", op, "] documents must be i32, got ", documents.dtype());
  TIDAL_CHECK(documents.device() == like.device(), "[", op, "] documents are on ", documents.device(),
              " but the attention runs on ", like.device());
  TIDAL_CHECK(key_offset >= 0, "[", op, "] key_offset must be >= 0, got ", key_offset);
}

}  // namespace tidal
