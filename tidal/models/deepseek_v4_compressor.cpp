#include "tidal/models/deepseek_v4_compressor.h"

#include "tidal/memory_scope.h"

#include <algorithm>
#include <limits>

#include "tidal/ops/elementwise.h"
#include "tidal/ops/index.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/softmax.h"
#include "tidal/ops/view.h"

namespace tidal::models {
namespace {

// Both views x (..., R) as (..., a, b) and swap the two: (R/2, 2) -> (2, R/2) de-interleaves, the reverse
// interleaves.
Tensor swap_split(const Tensor& x, int64_t a, int64_t b) {
  std::vector<int64_t> split(x.shape().begin(), x.shape().end() - 1);
  split.push_back(a);
  split.push_back(b);
  return x.reshape(Shape(split)).transpose(-1, -2).reshape(x.shape());
}
Tensor deinterleave(const Tensor& x) { return swap_split(x, x.size(-1) / 2, 2); }

}  // namespace

Tensor interleave(const Tensor& x) { return swap_split(x, 2, x.size(-1) / 2); }

Tensor rotate_tail(const Tensor& x, const RopeTables& rope, int64_t r) {
  const int64_t hd = x.size(3);
  Tensor nope = x.narrow(3, 0, hd - r).transpose(1, 2);  // (B, N, T, hd - r)
  Tensor rot = apply_rope(deinterleave(x.narrow(3, hd - r, r)).transpose(1, 2), rope.cos, rope.sin);  // (B, N, T, r)
  return cat({nope, rot}, 3);                                                                         // (B, N, T, hd)
}

Tensor pooled_entries(const Tensor& kv, const Tensor& gate, const nn::RMSNorm& kv_norm) {
  return kv_norm.forward(sum(mul(kv, softmax(gate, 2)), {2}));  // (B, W, D)
}

Tensor overlapped(const Tensor& x, double fill) {
  const int64_t b = x.size(0), w = x.size(1), m = x.size(2), d = x.size(3) / 2;
  Tensor first = full({b, 1, m, d}, fill, x.dtype(), x.device());             // window 0's missing half
  if (w > 1) first = cat({first, x.narrow(1, 0, w - 1).narrow(3, 0, d)}, 1);  // (B, W, m, D)
  return cat({first, x.narrow(3, d, d)}, 2);                                  // (B, W, 2m, D)
}

Tensor rotated_entries(const Tensor& pooled, const RopeTables& rope, int64_t m, int64_t r) {
  const int64_t b = pooled.size(0), w = pooled.size(1), d = pooled.size(2);
  std::vector<int64_t> starts;
  for (int64_t e = 0; e < w; ++e) starts.push_back(e * m);
  const Tensor rows = from_vector_i64(starts, {w}).to(pooled.device());
  const RopeTables at = {index_select(rope.cos, 0, rows), index_select(rope.sin, 0, rows)};  // (W, r)
  return rotate_tail(pooled.view({b, w, 1, d}), at, r);                                      // (B, 1, W, D)
}

Tensor complete_windows_mask(int64_t t, int64_t w, int64_t m, DType dtype, const Device& device) {
  std::vector<double> mask(size_t(t * w), -std::numeric_limits<double>::infinity());
  for (int64_t i = 0; i < t; ++i)
    for (int64_t e = 0; e < std::min(w, (i + 1) / m); ++e) mask[size_t(i * w + e)] = 0.0;
  return from_vector(mask, {t, w}, dtype).to(device);
}

HcaCompressor::HcaCompressor(const ModelConfig& c, const nn::Init& init) : rate_(c.v4.compress_rate_hca) {
  const int64_t d = c.hidden_size, hd = c.head_size();
  kv_proj_ = &register_module("kv_proj", std::make_unique<nn::Linear>(d, hd, false, init));
  gate_proj_ = &register_module("gate_proj", std::make_unique<nn::Linear>(d, hd, false, init));
  position_bias_ = register_parameter("position_bias", nn::constant_parameter({rate_, hd}, 0.0, init));
  kv_norm_ = &register_module("kv_norm", std::make_unique<nn::RMSNorm>(hd, c.norm_eps, init));
}

CompressedEntries HcaCompressor::forward(const Tensor& h, const RopeTables& rope, const ModelConfig& c,
                                         bool mask) const {
  ModuleScope scope(name());  // --report-memory: the compressed entries by module
  const int64_t b = h.size(0), t = h.size(1), m = rate_, w = t / m, hd = c.head_size();
  CompressedEntries out;
  if (mask) out.mask = complete_windows_mask(t, w, m, h.dtype(), h.device());  // (T, W)
  if (w == 0) return out;
  Tensor win = h.narrow(1, 0, w * m);                                                     // (B, W m, C)
  Tensor kv = kv_proj_->forward(win).view({b, w, m, hd});                                 // (B, W, m', hd)
  Tensor gate = add(gate_proj_->forward(win).view({b, w, m, hd}), position_bias_);        // (B, W, m', hd)
  out.kv = rotated_entries(pooled_entries(kv, gate, *kv_norm_), rope, m, c.v4.rope_dim);  // (B, 1, W, hd)
  return out;
}

}  // namespace tidal::models
