#include "tidal/parallel/context.h"

#include "tidal/dist/collectives.h"
#include "tidal/ops/ring_attention.h"
#include "tidal/ops/view.h"

// Note [Masked loss share]
// The loss of a micro-batch of instruction data (or under --eod-mask-loss) is Megatron's masked mean: the sum of the
// trained tokens' losses over their count. Under context parallelism each rank sees two chunks of every sample, and the
// chunks hold different numbers of trained tokens, so the ranks' local means cannot simply be averaged (dividing each
// by C, as for pretraining data, weighs a rank with 3 trained tokens like one with 300). Each rank instead
// scales its local mean by count_rank / count_total, the count summed over the CP group: the shares add up to
// sum / count_total, the one-process value. Data-parallel ranks and accumulated micro-batches then average the
// micro-batches' means, as Megatron and one process accumulating the same micro-batches do.
namespace tidal::parallel {

Tensor local_rows(const Tensor& x, int cp_size, int cp_rank) {
  if (cp_size == 1) return x;
  const ContextChunks at = context_chunks(x.size(1), cp_size, cp_rank);
  return cat({x.narrow(1, at.first, at.chunk), x.narrow(1, at.second, at.chunk)}, 1);
}

LocalTokens local_tokens(const Tensor& tokens, int cp_size, int cp_rank) {
  const int64_t t = tokens.size(1) - 1;
  return {local_rows(tokens.narrow(1, 0, t), cp_size, cp_rank), local_rows(tokens.narrow(1, 1, t), cp_size, cp_rank)};
}

double loss_share(int64_t count, dist::Communicator* cp) {
  const double total = cp == nullptr || cp->size() == 1 ? double(count) : dist::all_reduce_sum(*cp, double(count));
  return count == 0 ? 0.0 : double(count) / total;
}

MaskedTargets masked_targets(const Tensor& labels, dist::Communicator* cp) {
  MaskedTargets m;
  const int cp_size = cp != nullptr ? cp->size() : 1;
  m.targets = local_tokens(labels, cp_size, cp != nullptr ? cp->rank() : 0).labels.contiguous();  // (B, 2T/C)
  const int64_t* p = m.targets.data<int64_t>();
  for (int64_t k = 0; k < m.targets.numel(); ++k) m.count += p[k] != -100 ? 1 : 0;
  m.share = loss_share(m.count, cp);
  if (m.count == 0) {  // a finite local mean (of one token) times share 0: no value, no gradient
    m.targets = m.targets.clone();
    m.targets.data<int64_t>()[0] = 0;
  }
  return m;
}

}  // namespace tidal::parallel
