#include "tidal/memory/deepseek_v4_savings.h"

#include <algorithm>

namespace tidal::memory {

int64_t csa_attention_saving(const models::ModelConfig& c, int64_t layer, int64_t batch, int64_t seq, DType dtype) {
  if (!c.is_compressed(layer)) return 0;
  const bool csa = c.is_sparse_compressed(layer);
  const int64_t m = csa ? c.v4.compress_rate_csa : c.v4.compress_rate_hca, w = seq / m, slots = csa ? 2 * m : m;
  const int64_t p = dtype_size(dtype), b = batch, d = c.head_size(), h = c.num_attention_heads;
  const int64_t kept_choice = csa ? 4 * b * seq * std::min(c.v4.index_topk, w) : 0;
  return p * (b * w * d * (2 * slots + 2) + b * h * seq * (seq + w + 1)) + 4 * b * w - kept_choice;
}

int64_t mhc_saving(const models::ModelConfig& c, int64_t batch, int64_t seq, DType dtype) {
  const int64_t p = dtype_size(dtype), n = c.v4.hc_mult, tokens = batch * seq, streams = n * c.hidden_size;
  return 2 * (p * tokens * (streams + 3 * n * n + 5 * n) + 4 * tokens) + p * tokens * streams;
}

int64_t deepseek_v4_recompute_saving(const models::ModelConfig& c, const std::vector<models::LayerRecompute>& plan,
                                     int64_t batch, int64_t seq, DType dtype) {
  int64_t saved = 0;
  for (size_t l = 0; l < plan.size(); ++l) {
    if (plan[l].csa_attention) saved += csa_attention_saving(c, int64_t(l), batch, seq, dtype);
    if (plan[l].mhc) saved += mhc_saving(c, batch, seq, dtype);
  }
  return saved;
}

}  // namespace tidal::memory
