#include "tidal/parallel/context.h"

#include "tidal/ops/ring_attention.h"
#include "tidal/ops/view.h"

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

}  // namespace tidal::parallel
