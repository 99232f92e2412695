#include "tidal/models/deepseek_v4_sparse.h"

#include "tidal/memory_scope.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tidal/autograd/checkpoint.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/autograd/saved_tensor_log.h"
#include "tidal/base/parallel.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/view.h"

namespace tidal::models {
namespace {

// A module holding its parameter under a name of its own (the scorer's weights_proj).
class Holder : public nn::Module {
 public:
  template <typename M>
  M* add(const std::string& name, std::unique_ptr<M> m) {
    return &register_module(name, std::move(m));
  }
};

// The overlapping windows' entries: h (B, W m, C) through kv_proj / gate_proj (C -> 2D) -> (B, W, D) pooled.
Tensor overlapping_pool(const Tensor& h, const nn::Linear& kv_proj, const nn::Linear& gate_proj,
                        const Tensor& position_bias, const nn::RMSNorm& kv_norm, int64_t w, int64_t m) {
  const int64_t b = h.size(0), d2 = position_bias.size(1);
  Tensor kv = kv_proj.forward(h).view({b, w, m, d2});                          // (B, W, m, 2D)
  Tensor gate = add(gate_proj.forward(h).view({b, w, m, d2}), position_bias);  // (B, W, m, 2D)
  return pooled_entries(overlapped(kv, 0.0), overlapped(gate, -std::numeric_limits<double>::infinity()), kv_norm);
}

// Each row of a chunk of query rows [i0, i0 + n) keeps the best `keep` of its complete windows' entries, best first
// (ties: the earlier entry): score (B, n, W) on the host -> kept (B, T, k) i32. One pass over the row with a heap of
// the `keep` best so far, whose top is the worst of them (the lowest score; among equal ones the latest entry): an
// entry enters only when strictly better than the top, since every entry seen later loses a tie. Rows run in
// parallel, each on its own.
template <typename T>
void keep_best(const T* score, int64_t b, int64_t n, int64_t i0, int64_t t, int64_t w, int64_t m, int64_t k,
               int32_t* kept) {
  parallel_for(0, b * n, 16, [&](int64_t r0, int64_t r1) {
    std::vector<int32_t> heap(static_cast<size_t>(k));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t s = r / n, i = i0 + r % n;
      const int64_t complete = std::min(w, (i + 1) / m), keep = std::min(k, complete);
      if (keep == 0) continue;
      const T* row = score + r * w;
      const auto better = [row](int32_t x, int32_t y) { return row[x] > row[y] || (row[x] == row[y] && x < y); };
      std::iota(heap.begin(), heap.begin() + keep, int32_t(0));
      std::make_heap(heap.begin(), heap.begin() + keep, better);  // the top: the worst kept
      for (int32_t e = int32_t(keep); e < complete; ++e) {
        if (!(row[e] > row[heap[0]])) continue;
        std::pop_heap(heap.begin(), heap.begin() + keep, better);
        heap[size_t(keep - 1)] = e;
        std::push_heap(heap.begin(), heap.begin() + keep, better);
      }
      std::sort(heap.begin(), heap.begin() + keep, better);
      std::copy_n(heap.begin(), keep, kept + (s * t + i) * k);
    }
  });
}

// The composed core's additive mask (B, 1, T, W) of the entries kept (B, T, k) i32 (-1: none), on `device`.
Tensor kept_entries_mask(const Tensor& kept, int64_t w, DType dtype, const Device& device) {
  const int64_t b = kept.size(0), t = kept.size(1), k = kept.size(2);
  std::vector<double> mask(size_t(b * t * w), -std::numeric_limits<double>::infinity());
  if (!kept.is_meta()) {  // the meta device's mask has a shape only
    const Tensor host = kept.to(Device::cpu()).contiguous();
    const int32_t* idx = host.data<int32_t>();
    for (int64_t row = 0; row < b * t; ++row)
      for (int64_t j = 0; j < k; ++j)
        if (idx[row * k + j] >= 0) mask[size_t(row * w + idx[row * k + j])] = 0.0;
  }
  return from_vector(mask, {b, 1, t, w}, dtype).to(device);  // (B, 1, T, W)
}

}  // namespace

CsaIndexer::CsaIndexer(const ModelConfig& c, const nn::Init& init) {
  const int64_t d = c.hidden_size, id = c.v4.index_head_dim, heads = c.v4.index_n_heads, m = c.v4.compress_rate_csa;
  kv_proj_ = &register_module("kv_proj", std::make_unique<nn::Linear>(d, 2 * id, false, init));
  gate_proj_ = &register_module("gate_proj", std::make_unique<nn::Linear>(d, 2 * id, false, init));
  position_bias_ = register_parameter("position_bias", nn::constant_parameter({m, 2 * id}, 0.0, init));
  kv_norm_ = &register_module("kv_norm", std::make_unique<nn::RMSNorm>(id, c.norm_eps, init));
  q_b_proj_ = &register_module("q_b_proj", std::make_unique<nn::Linear>(c.q_lora_rank, heads * id, false, init));
  weights_proj_ = register_module("scorer", std::make_unique<Holder>())
                      .add("weights_proj", std::make_unique<nn::Linear>(d, heads, false, init));
}

Tensor CsaIndexer::choose(const Tensor& h, const Tensor& q_residual, const RopeTables& rope,
                          const ModelConfig& c) const {
  NoGradGuard no_grad;  // the choice is an index: nothing differentiates through it
  ModuleScope scope(name());
  // Under a checkpoint (--recompute-csa-attention's, a fully recomputed layer's) the replay takes the first run's
  // choice: the indexer does not run again, and the kept indices (B, T, k) i32 stay until backward, as activations.
  Tensor kept = autograd::checkpoint_decision([&] { return top_entries(h, q_residual, rope, c); });  // (B, T, k)
  if (autograd::recording_decisions()) {  // kept from forward to backward: an activation, in --report-memory's table
    kept.storage()->set_category(MemoryCategory::activation);
    OpScope op("checkpoint_decision");
    autograd::SavedTensorLog::note(kept, nullptr);
  }
  return kept;
}

Tensor CsaIndexer::top_entries(const Tensor& h, const Tensor& q_residual, const RopeTables& rope,
                               const ModelConfig& c) const {
  const int64_t b = h.size(0), t = h.size(1), m = c.v4.compress_rate_csa, w = t / m, k = std::min(c.v4.index_topk, w);
  const int64_t heads = c.v4.index_n_heads, id = c.v4.index_head_dim, r = c.v4.rope_dim;
  Tensor keys = rotated_entries(
      overlapping_pool(h.narrow(1, 0, w * m), *kv_proj_, *gate_proj_, position_bias_, *kv_norm_, w, m), rope, m,
      r);                                                                                   // (B, 1, W, id)
  Tensor q = rotate_tail(q_b_proj_->forward(q_residual).view({b, t, heads, id}), rope, r);  // (B, I, T, id)
  Tensor weights = mul(weights_proj_->forward(h), 1.0 / std::sqrt(double(heads)));          // (B, T, I)

  Tensor kept = full({b, t, k}, -1.0, DType::i32);  // (B, T, k) on the host; -1: a slot left empty
  int32_t* out = kept.data<int32_t>();
  // Rows at a time: the chunk's scores (B, I, rows, W) hold at most ~16M elements.
  const int64_t rows = std::clamp<int64_t>((int64_t(1) << 24) / std::max<int64_t>(1, b * heads * w), 1, t);
  for (int64_t i0 = 0; i0 < t; i0 += rows) {
    const int64_t n = std::min(rows, t - i0);
    Tensor scores =
        mul(relu(matmul(q.narrow(2, i0, n), keys.transpose(-1, -2))), 1.0 / std::sqrt(double(id)));  // (B, I, n, W)
    Tensor score = sum(mul(scores, weights.narrow(1, i0, n).transpose(1, 2).unsqueeze(-1)), {1});    // (B, n, W)
    if (score.is_meta()) continue;  // no values: filled below
    // bf16 scores compare as f32 (exactly the same order); f32 and f64 as they are.
    const Tensor host = (score.dtype() == DType::bf16 ? score.to(DType::f32) : score).to(Device::cpu()).contiguous();
    if (host.dtype() == DType::f64)
      keep_best(host.data<double>(), b, n, i0, t, w, m, k, out);
    else
      keep_best(host.data<float>(), b, n, i0, t, w, m, k, out);
  }
  if (h.is_meta())  // the meta device's choice: the first complete entries, as a stand-in shape
    for (int64_t s = 0; s < b; ++s)
      for (int64_t i = 0; i < t; ++i)
        for (int64_t j = 0; j < std::min(k, std::min(w, (i + 1) / m)); ++j) out[(s * t + i) * k + j] = int32_t(j);
  return kept.to(h.device());  // (B, T, k)
}

CsaCompressor::CsaCompressor(const ModelConfig& c, const nn::Init& init) {
  const int64_t d = c.hidden_size, hd = c.head_size(), m = c.v4.compress_rate_csa;
  kv_proj_ = &register_module("kv_proj", std::make_unique<nn::Linear>(d, 2 * hd, false, init));
  gate_proj_ = &register_module("gate_proj", std::make_unique<nn::Linear>(d, 2 * hd, false, init));
  position_bias_ = register_parameter("position_bias", nn::constant_parameter({m, 2 * hd}, 0.0, init));
  kv_norm_ = &register_module("kv_norm", std::make_unique<nn::RMSNorm>(hd, c.norm_eps, init));
  indexer_ = &register_module("indexer", std::make_unique<CsaIndexer>(c, init));
}

CompressedEntries CsaCompressor::forward(const Tensor& h, const Tensor& q_residual, const RopeTables& rope,
                                         const ModelConfig& c, bool mask) const {
  ModuleScope scope(name());  // --report-memory: the compressed entries by module
  const int64_t m = c.v4.compress_rate_csa, w = h.size(1) / m;
  CompressedEntries out;
  if (w == 0) return out;
  Tensor pooled = overlapping_pool(h.narrow(1, 0, w * m), *kv_proj_, *gate_proj_, position_bias_, *kv_norm_, w, m);
  out.kv = rotated_entries(pooled, rope, m, c.v4.rope_dim);                    // (B, 1, W, hd)
  out.kept = indexer_->choose(h, q_residual, rope, c);                         // (B, T, k)
  if (mask) out.mask = kept_entries_mask(out.kept, w, h.dtype(), h.device());  // (B, 1, T, W)
  return out;
}

}  // namespace tidal::models
