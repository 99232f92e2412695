#include "tidal/models/core_attention.h"

#include "tidal/ops/ring_attention.h"

namespace tidal::models {

Tensor CoreAttention::operator()(const Tensor& q, const Tensor& k, const Tensor& v, AttentionOptions opt) const {
  opt.kernel = kernel;
  return context_parallel() ? ring_attention(q, k, v, *cp, opt, overlap) : scaled_dot_product_attention(q, k, v, opt);
}

int64_t CoreAttention::sequence_length(int64_t local) const { return context_parallel() ? local * cp->size() : local; }

std::vector<std::pair<int64_t, int64_t>> CoreAttention::positions(int64_t local) const {
  if (!context_parallel()) return {{0, local}};
  const ContextChunks at = context_chunks(sequence_length(local), cp->size(), cp->rank());
  return {{at.first, at.chunk}, {at.second, at.chunk}};
}

}  // namespace tidal::models
