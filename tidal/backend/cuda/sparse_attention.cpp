// The sparse attention family's methods of CudaKernels (ops/sparse_attention.h: attention over per-query kept
// keys): checks and arguments, then sparse_attention.cu's launchers. The backward's dk and dv are summed per key
// over the slots that read it, in the order of an inverted index of kept (key -> its slots in row order) built
// here on the host as the CPU builds it: kept is read back (the stream synchronized), the index uploaded into the
// workspace after P and dS, and the per-key kernel finds each key's slots there. No atomics: the sums' order
// depends on kept alone.
#include <initializer_list>
#include <vector>

#include "tidal/backend/cuda/check.h"
#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/shared_memory.h"
#include "tidal/backend/cuda/sparse_attention_launch.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/base/error.h"
#include "tidal/tensor.h"

namespace tidal::cuda {
namespace {

DType acc_of(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

SparseView view(const Tensor& t) {
  if (!t.defined()) return {};
  return {device_data(t), {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}};
}

SparseDims dims(const Tensor& q, const Tensor& keys, const Tensor& values, const Tensor& kept) {
  return {q.size(0), q.size(1), q.size(2), q.size(3), keys.size(1), keys.size(2), values.size(3), kept.size(2)};
}

// The seam's layout (seam/kernels.h): one floating dtype, kept i32 contiguous, lse-like tensors contiguous in the
// accumulate type; a grid of one block per row.
void check_operands(const char* kernel, const Tensor& q, const Tensor& keys, const Tensor& values, const Tensor& kept,
                    std::initializer_list<const Tensor*> same_dtype, std::initializer_list<const Tensor*> rows) {
  TIDAL_CHECK(is_floating(q.dtype()), "[", kernel, "] expects a floating tensor (f32, bf16 or f64), got ", q.dtype());
  for (const Tensor* t : same_dtype)
    TIDAL_ASSERT(!t->defined() || (t->dim() == 4 && t->dtype() == q.dtype()), "[cuda] ", kernel,
                 " needs (B, H, L, D) tensors of one dtype, got ", t->shape(), " ", t->dtype());
  TIDAL_ASSERT(kept.dtype() == DType::i32 && kept.dim() == 3 && kept.is_contiguous(), "[cuda] ", kernel,
               " needs kept (B, T, k) i32 contiguous, got ", kept.shape(), " ", kept.dtype());
  TIDAL_ASSERT(keys.size(1) > 0 && q.size(1) % keys.size(1) == 0, "[cuda] ", kernel, ": ", q.size(1),
               " query heads over ", keys.size(1), " key heads");
  for (const Tensor* t : rows)
    TIDAL_ASSERT(
        !t->defined() ||
            (t->is_contiguous() && t->dtype() == acc_of(q.dtype()) && t->numel() == q.size(0) * q.size(1) * q.size(2)),
        "[cuda] ", kernel, " needs (B, Hq, T) ", acc_of(q.dtype()), " contiguous, got ", t->shape(), " ", t->dtype());
  TIDAL_ASSERT(values.size(1) == keys.size(1) && values.size(2) == keys.size(2), "[cuda] ", kernel, ": keys ",
               keys.shape(), " and values ", values.shape());
  TIDAL_CHECK(q.size(0) * q.size(2) * q.size(1) < (int64_t(1) << 31), "[", kernel,
              "] on cuda runs a block per (batch, query, head) row: at most 2^31 - 1 of them, got ",
              q.size(0) * q.size(2) * q.size(1));
}

}  // namespace

// P and dS of every (b, i, h, slot), (B, T, Hq, k) each, then the inverted index of kept (an i64 per slot), in
// accumulate-type elements.
int64_t CudaKernels::sparse_attention_backward_workspace(const Tensor& q, const Tensor& kept) const {
  const int64_t slots = q.size(0) * q.size(2) * kept.size(2), elem = dtype_size(acc_of(q.dtype()));
  return 2 * slots * q.size(1) + (slots * int64_t(sizeof(int64_t)) + elem - 1) / elem;
}

void CudaKernels::sparse_attention_forward(Stream& stream, double scale, const Tensor& out, const Tensor& lse,
                                           const Tensor& q, const Tensor& keys, const Tensor& values,
                                           const Tensor& kept) {
  check_operands("sparse_attention", q, keys, values, kept, {&q, &keys, &values, &out}, {&lse});
  const int64_t bytes = sparse_attention_forward_shared_bytes(q.dtype(), kept.size(2)) + kSparseStaticSharedBytes;
  if (bytes > kDefaultSharedBytes) {
    const int64_t limit = max_shared_bytes(q.device().index);
    TIDAL_CHECK(bytes <= limit, "[sparse_attention] on cuda keeps a row's ", kept.size(2),
                " kept scores in shared memory: ", bytes, " bytes, more than this GPU's ", limit);
  }
  launch_sparse_attention_forward(stream_handle(stream), q.dtype(), dims(q, keys, values, kept), scale, view(out),
                                  device_data(lse), view(q), view(keys), view(values),
                                  static_cast<const int32_t*>(device_data(kept)));
}

void CudaKernels::sparse_attention_backward(Stream& stream, double scale, const Tensor& dq, const Tensor& dk,
                                            const Tensor& dv, const Tensor& dout, const Tensor& dlse, const Tensor& q,
                                            const Tensor& keys, const Tensor& values, const Tensor& kept,
                                            const Tensor& out, const Tensor& lse, const Tensor& workspace) {
  check_operands("sparse_attention_backward", q, keys, values, kept, {&q, &keys, &values, &out, &dout, &dq, &dk, &dv},
                 {&lse, &dlse});
  const DType acc = acc_of(q.dtype());
  TIDAL_ASSERT(workspace.dtype() == acc && workspace.numel() >= sparse_attention_backward_workspace(q, kept),
               "[cuda] sparse_attention_backward: workspace too small");
  const bool keys_wanted = (dk.defined() && dk.numel() > 0) || (dv.defined() && dv.numel() > 0);
  if (!dq.defined() && !keys_wanted) return;
  const cudaStream_t s = stream_handle(stream);
  const SparseDims n = dims(q, keys, values, kept);
  const int64_t slots = n.b * n.t * n.k, elem = dtype_size(acc);
  char* ws = static_cast<char*>(device_data(workspace));
  char* prob = ws;
  char* dscore = prob + slots * n.hq * elem;
  int64_t* pairs_dev = reinterpret_cast<int64_t*>(dscore + slots * n.hq * elem);  // 8-byte aligned: 2 * slots * Hq
  const int32_t* kept_dev = static_cast<const int32_t*>(device_data(kept));
  launch_sparse_attention_backward_rows(s, q.dtype(), n, scale, view(dq), prob, dscore, view(dout),
                                        dlse.defined() ? device_data(dlse) : nullptr, view(q), view(keys), view(values),
                                        kept_dev, view(out), device_data(lse));
  if (!keys_wanted) return;
  // The slots that read each key, in row order: (b, key) -> the slots r * k + j with kept[r, j] = key, grouped by
  // (b, key) in increasing order (the CPU's counting sort).
  std::vector<int32_t> idx(static_cast<size_t>(slots));
  if (slots > 0) {
    TIDAL_CUDA_CHECK(cudaMemcpyAsync(idx.data(), kept_dev, size_t(slots) * sizeof(int32_t), cudaMemcpyDefault, s));
    TIDAL_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  std::vector<int64_t> start(static_cast<size_t>(n.b * n.w + 1), 0);
  for (int64_t r = 0; r < n.b * n.t; ++r)
    for (int64_t j = 0; j < n.k; ++j)
      if (const int32_t key = idx[size_t(r * n.k + j)]; key >= 0) {
        TIDAL_ASSERT(key < n.w, "[cuda] sparse_attention_backward: kept index ", key, " out of [0, ", n.w, ")");
        ++start[size_t((r / n.t) * n.w + key + 1)];
      }
  for (size_t e = 1; e < start.size(); ++e) start[e] += start[e - 1];
  const int64_t count = start.back();
  std::vector<int64_t> pairs(static_cast<size_t>(count));
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t r = 0; r < n.b * n.t; ++r)
    for (int64_t j = 0; j < n.k; ++j)
      if (const int32_t key = idx[size_t(r * n.k + j)]; key >= 0)
        pairs[size_t(fill[size_t((r / n.t) * n.w + key)]++)] = r * n.k + j;
  if (count > 0) {  // pageable host memory: synchronized before the vector goes
    TIDAL_CUDA_CHECK(cudaMemcpyAsync(pairs_dev, pairs.data(), size_t(count) * sizeof(int64_t), cudaMemcpyDefault, s));
    TIDAL_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  const SparseView dkv = dk.defined() && dk.numel() > 0 ? view(dk) : SparseView{};
  const SparseView dvv = dv.defined() && dv.numel() > 0 ? view(dv) : SparseView{};
  launch_sparse_attention_backward_keys(s, q.dtype(), n, scale, dkv, dvv, prob, dscore, view(q), view(dout), kept_dev,
                                        pairs_dev, count);
}

}  // namespace tidal::cuda
