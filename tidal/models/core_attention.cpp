#include "tidal/models/core_attention.h"

#include "tidal/ops/context_gather_attention.h"
#include "tidal/ops/random.h"
#include "tidal/ops/ring_attention.h"

namespace tidal::models {

Tensor CoreAttention::operator()(const Tensor& q, const Tensor& k, const Tensor& v, AttentionOptions opt) const {
  opt.kernel = kernel;
  opt.documents = documents;
  if (!context_parallel()) return scaled_dot_product_attention(q, k, v, opt);
  return kernel == AttentionKernel::eager ? context_gather_attention(q, k, v, *cp, opt)
                                          : ring_attention(q, k, v, *cp, opt, overlap);
}

int64_t CoreAttention::sequence_length(int64_t local) const { return context_parallel() ? local * cp->size() : local; }

std::vector<std::pair<int64_t, int64_t>> CoreAttention::positions(int64_t local) const {
  if (!context_parallel()) return {{0, local}};
  const ContextChunks at = context_chunks(sequence_length(local), cp->size(), cp->rank());
  return {{at.first, at.chunk}, {at.second, at.chunk}};
}

Tensor CoreAttention::dropout(const Tensor& x, double p, bool training) const {
  if (!context_parallel() || !training || p == 0.0) return tidal::dropout(x, p, training);
  int64_t row = 1;  // the elements of one token
  for (int d = 2; d < x.dim(); ++d) row *= x.size(d);
  const int64_t seq = sequence_length(x.size(1));
  return dropout_rows(x, p, reserve_row_frame(x.size(0), seq, row, context_rows(seq, cp->size(), cp->rank())));
}

}  // namespace tidal::models
