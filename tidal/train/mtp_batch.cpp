#include "tidal/train/mtp_batch.h"

#include <vector>

#include "tidal/base/error.h"
#include "tidal/ops/documents.h"
#include "tidal/ops/ring_attention.h"

namespace tidal::train {

memory::MtpInputs mtp_inputs(const Tensor& tokens, const Tensor& labels, int64_t depths, int cp_size, int cp_rank,
                             Device device) {
  TIDAL_CHECK(tokens.dim() == 2 && tokens.size(1) >= 2 && tokens.dtype() == DType::i64 && tokens.device().is_cpu(),
              "[mtp] tokens must be (B, T + 1) i64 on the host, got ", tokens.shape(), " ", tokens.dtype(), " on ",
              tokens.device());
  TIDAL_CHECK(!labels.defined() ||
                  (labels.shape() == tokens.shape() && labels.dtype() == DType::i64 && labels.device().is_cpu()),
              "[mtp] labels must be like the tokens ", tokens.shape(), ", got ", labels.shape());
  const int64_t b = tokens.size(0), t = tokens.size(1) - 1;
  const std::vector<int64_t> rows = cp_size > 1 ? context_rows(t, cp_size, cp_rank) : std::vector<int64_t>();
  const int64_t n = rows.empty() ? t : int64_t(rows.size());
  const Tensor host_tokens = tokens.contiguous();
  const Tensor host_labels = labels.defined() ? labels.contiguous() : host_tokens;
  const int64_t* ids = host_tokens.data<int64_t>();      // (B, T + 1)
  const int64_t* trg = host_labels.data<int64_t>() + 1;  // targets[r][i] = trg[r * (T + 1) + i], i < T
  memory::MtpInputs out;
  for (int64_t k = 1; k <= depths; ++k) {
    std::vector<int64_t> depth_ids(size_t(b * n)), depth_targets(size_t(b * n));
    int64_t here = 0, all = 0;  // trained targets on this rank, in the whole micro-batch
    for (int64_t r = 0; r < b; ++r) {
      for (int64_t i = 0; i + k < t; ++i) all += trg[r * (t + 1) + i + k] != -100;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t i = rows.empty() ? j : rows[size_t(j)];  // the global position of local row j
        const bool inside = i + k < t;
        depth_ids[size_t(r * n + j)] = inside ? ids[r * (t + 1) + i + k] : 0;
        const int64_t target = inside ? trg[r * (t + 1) + i + k] : -100;
        depth_targets[size_t(r * n + j)] = target;
        here += target != -100;
      }
    }
    if (here == 0) depth_targets[0] = 0;  // weight 0: the local mean only has to stay finite
    out.ids.push_back(host_values_on(depth_ids, {b, n}, device));
    out.targets.push_back(host_values_on(depth_targets, {b, n}, device));
    out.weights.push_back(all > 0 && here > 0 ? double(here) / double(all) : 0.0);
  }
  return out;
}

}  // namespace tidal::train
