#include "tidal/parallel/context.h"

#include "tidal/ops/ring_attention.h"
#include "tidal/ops/view.h"

namespace tidal::parallel {

LocalTokens local_tokens(const Tensor& tokens, int cp_size, int cp_rank) {
  const int64_t t = tokens.size(1) - 1;
  const Tensor inputs = tokens.narrow(1, 0, t), labels = tokens.narrow(1, 1, t);
  if (cp_size == 1) return {inputs, labels};
  const ContextChunks at = context_chunks(t, cp_size, cp_rank);
  const auto mine = [&](const Tensor& x) {
    return cat({x.narrow(1, at.first, at.chunk), x.narrow(1, at.second, at.chunk)}, 1);
  };
  return {mine(inputs), mine(labels)};
}

}  // namespace tidal::parallel
