#include "tidal/train/packed_batch.h"

#include <vector>

#include "tidal/base/error.h"
#include "tidal/ops/ring_attention.h"
#include "tidal/parallel/context.h"

namespace tidal::train {

// Everything derived from the tokens is worked out in host arrays and written once to the device:
// on a CPU run the host is the device, and the dry run (meta) must allocate what the real run does.
RankBatch rank_batch(const Tensor& tokens, const PackedSequences& packing, int64_t eod, int cp_size, int cp_rank,
                     Device device, const Tensor& pack_samples) {
  TIDAL_CHECK(tokens.dim() == 2 && tokens.size(1) >= 2 && tokens.dtype() == DType::i64 && tokens.device().is_cpu(),
              "[rank_batch] tokens must be (B, T + 1) i64 on the host, got ", tokens.shape(), " ", tokens.dtype(),
              " on ", tokens.device());
  // The loader's batch to the run's device (meta: the shape only); inputs and labels are views of it.
  const Tensor moved = tokens.device() == device ? tokens : tokens.to(device);
  const parallel::LocalTokens local = parallel::local_tokens(moved, cp_size, cp_rank);
  RankBatch out{local.inputs, local.labels, {}, local.labels.numel(), moved};
  if (!packing.any()) return out;
  const int64_t b = tokens.size(0), t = tokens.size(1) - 1;
  const std::vector<int64_t> rows = cp_size > 1 ? context_rows(t, cp_size, cp_rank) : std::vector<int64_t>();
  const int64_t n = rows.empty() ? t : int64_t(rows.size());
  const Tensor host = tokens.contiguous();
  const int64_t* ids = host.data<int64_t>();  // (B, T + 1)
  if (packing.eod_mask_loss) {                // no loss where the input is EOD (Megatron's loss_mask[data == eod] = 0)
    std::vector<int64_t> labels(size_t(b * n));
    out.targets = 0;
    for (int64_t r = 0; r < b; ++r)
      for (int64_t k = 0; k < n; ++k) {
        const int64_t i = rows.empty() ? k : rows[size_t(k)];
        const bool masked = ids[r * (t + 1) + i] == eod;
        labels[size_t(r * n + k)] = masked ? -100 : ids[r * (t + 1) + i + 1];
        out.targets += !masked;
      }
    out.labels = host_values_on(labels, {b, n}, device);
  }
  TIDAL_CHECK(!packing.neat_pack || (pack_samples.defined() && pack_samples.shape() == tokens.shape()),
              "[rank_batch] --neat-pack needs each token's sample index (the data's attention-mask file), (B, T + 1) ",
              "as the tokens ", tokens.shape());
  DocumentLayout layout = packing.neat_pack ? sample_document_layout(pack_samples.narrow(1, 0, t), rows, device)
                                            : document_layout(tokens.narrow(1, 0, t), eod, rows, device);
  if (packing.reset_attention_mask) out.docs.starts = layout.starts;
  if (packing.reset_position_ids) out.docs.positions = layout.positions;
  return out;
}

}  // namespace tidal::train
