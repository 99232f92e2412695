#include "tidal/memory/deepseek_v4_savings.h"

#include <algorithm>

namespace tidal::memory {

int64_t csa_attention_saving(const models::ModelConfig& c, int64_t layer, int64_t batch, int64_t seq, DType dtype,
                             AttentionKernel kernel) {
  if (!c.is_compressed(layer)) return 0;
  const bool csa = c.is_sparse_compressed(layer);
  const int64_t m = csa ? c.v4.compress_rate_csa : c.v4.compress_rate_hca, w = seq / m, slots = csa ? 2 * m : m;
  const int64_t p = dtype_size(dtype), a = dtype == DType::f64 ? 8 : 4, b = batch, d = c.head_size();
  const int64_t h = c.num_attention_heads, k = std::min(c.v4.index_topk, w), rows = b * seq * h;
  const int64_t compressor = p * b * w * d * (2 * slots + 1) + 4 * b * w;
  const int64_t kept_choice = csa ? 4 * b * seq * k : 0;
  if (kernel == AttentionKernel::eager) return compressor + p * (b * w * d + b * h * seq * (seq + w + 1)) - kept_choice;
  // The window's output and log-sum-exp; the entries, their output and log-sum-exp (HCA: and its u8 mask of rows
  // without entries; CSA's kept indices stay, as the checkpoint's decision); the merge weights.
  int64_t core = p * rows * d + a * rows;
  if (w > 0) core += p * b * w * d + p * rows * d + a * rows + (csa ? 0 : rows);
  const int64_t parts = w > 0 ? 3 : 2;
  return compressor + core + a * rows * parts + (p != a ? p * rows * parts : 0);
}

int64_t mhc_saving(const models::ModelConfig& c, int64_t batch, int64_t seq, DType dtype) {
  const int64_t p = dtype_size(dtype), n = c.v4.hc_mult, tokens = batch * seq, streams = n * c.hidden_size;
  return 2 * (p * tokens * (streams + 3 * n * n + 5 * n) + 4 * tokens) + p * tokens * streams;
}

int64_t deepseek_v4_recompute_saving(const models::ModelConfig& c, const std::vector<models::LayerRecompute>& plan,
                                     int64_t batch, int64_t seq, DType dtype, AttentionKernel kernel) {
  int64_t saved = 0;
  for (size_t l = 0; l < plan.size(); ++l) {
    if (plan[l].csa_attention) saved += csa_attention_saving(c, int64_t(l), batch, seq, dtype, kernel);
    if (plan[l].mhc) saved += mhc_saving(c, batch, seq, dtype);
  }
  return saved;
}

}  // namespace tidal::memory
