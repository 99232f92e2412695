#pragma once
// The decoder layers' core attention: scaled_dot_product_attention over the whole sequence, or, with
// context parallelism, ring attention over the CP group (ops/ring_attention.h) with the flash kernel or
// the all-gather of K/V with eager (ops/context_gather_attention.h), and the global
// positions of the tokens a rank holds (and the hidden dropout drawn at them).
#include <cstdint>
#include <utility>
#include <vector>

#include "tidal/dist/communicator.h"
#include "tidal/ops/attention.h"
#include "tidal/tensor.h"

namespace tidal::models {

struct CoreAttention {
  AttentionKernel kernel = AttentionKernel::flash;
  dist::Communicator* cp = nullptr;       // the context-parallel group; null: none
  dist::Communicator* overlap = nullptr;  // a duplicate of cp: the ring's K/V blocks move while compute runs
  Tensor documents;  // packed sequences: (B, T_local) i32 document starts (AttentionOptions::documents); or none
  bool context_parallel() const { return cp != nullptr && cp->size() > 1; }
  // q (B, Hq, T, D), k/v (B, Hkv, T, D) as scaled_dot_product_attention takes them; opt.kernel and
  // opt.documents are set here.
  Tensor operator()(const Tensor& q, const Tensor& k, const Tensor& v, AttentionOptions opt) const;
  // The whole sequence's length when a rank holds `local` tokens of every sample.
  int64_t sequence_length(int64_t local) const;
  // The runs of global positions (start, length) of a rank's `local` tokens, in order: [0, local),
  // or its two chunks.
  std::vector<std::pair<int64_t, int64_t>> positions(int64_t local) const;
  // Dropout of a (B, T_local, C...) activation of the sequence: dropout() or, under context
  // parallelism, dropout_rows at the rank's global rows, so the mask is one process's.
  Tensor dropout(const Tensor& x, double p, bool training) const;
};

}  // namespace tidal::models
