#pragma once
// DeepSeek-V4's manifold-constrained hyper-connections (mHC; transformers' DeepseekV4HyperConnection and
// DeepseekV4HyperHead). The residual is N = hc_mult streams (B, T, N, C). Around each attention or MLP
// block a HyperConnection reads the streams, flattened and RMS-normalized without a weight, through one
// projection `fn` ((2 + N) N, N C) into three mappings:
//   pre  = sigmoid(w_pre * scale[0] + base_pre) + eps          (B, T, N)    collapses the streams into the
//                                                                            block's input sum_n pre_n x_n
//   post = 2 sigmoid(w_post * scale[1] + base_post)            (B, T, N)    spreads the block's output
//   comb = sinkhorn(softmax(w_comb * scale[2] + base_comb) + eps)  (B, T, N, N)  mixes the streams
// and the new streams are post_n * block_out + sum_m comb[m, n] x_m (comb transposed, as transformers
// multiplies). The Sinkhorn-Knopp projection (ops/sinkhorn.h, hc_sinkhorn_iters, hc_eps) keeps comb near
// the doubly stochastic matrices. The HyperHead collapses the final streams the same way with its own
// pre mapping (hc_fn (N, N C), hc_base (N), hc_scale (1)).
//
// Note [mHC recompute]
// --mhc-recompute (MindSpeed-LLM's) recomputes, in every layer not under full recompute, the attention's pre and post
// mappings and the MLP's pre mapping. The pre mappings (collapse) run in an autograd::checkpoint: the flattened,
// normalized streams (B, T, N C), the projection's output, the sigmoids, the softmax and Sinkhorn's input go; the
// streams (the region's input, kept anyway) and the outputs post, comb and the block's input stay. The attention's
// post mapping (expand) is output-discarding (CheckpointWithoutOutput): its output, the mid-layer streams x
// (B, T, N, C), is freed once the MLP's mappings and the MLP's expansion saved it, and computed again from {post,
// comb, streams, attention output} (all kept) before the layer's last node's backward. A checkpoint keeps the
// graph's nodes, so every gradient sums its terms in the plain run's order (bitwise); an output-discarding collapse
// would sum the streams' two terms inside its own backward first, which is not. The MLP's post mapping is left: its
// output is the next layer's input, which stays anyway. The hyper head is not recomputed.
#include <cstdint>

#include "tidal/nn/layers.h"

namespace tidal::models {

struct HyperConnectionConfig {
  int64_t streams = 4;  // hc_mult
  int64_t hidden = 0;   // C
  int64_t sinkhorn_iters = 20;
  double eps = 1e-6;       // hc_eps
  double norm_eps = 1e-6;  // rms_norm_eps, of the unweighted input norm
};

// The mappings of one block: what collapse() consumed (pre) is not kept.
struct HyperMappings {
  Tensor post;       // (B, T, N)
  Tensor comb;       // (B, T, N, N)
  Tensor collapsed;  // (B, T, C): the block's input
};

class HyperConnection : public nn::Module {
 public:
  HyperConnection(const HyperConnectionConfig& c, const nn::Init& init);
  // streams (B, T, N, C) -> the mappings and the block's input. recompute (--mhc-recompute): under a checkpoint that
  // keeps the streams only; the outputs stay (their consumers save them), the intermediates are recomputed.
  HyperMappings collapse(const Tensor& streams, bool recompute = false) const;
  // The new streams (B, T, N, C) from the old ones and the block's output (B, T, C).
  static Tensor expand(const HyperMappings& m, const Tensor& streams, const Tensor& block_out);

 private:
  HyperConnectionConfig c_;
  Tensor fn_;     // ((2 + N) N, N C)
  Tensor base_;   // ((2 + N) N)
  Tensor scale_;  // (3)
};

class HyperHead : public nn::Module {
 public:
  HyperHead(const HyperConnectionConfig& c, const nn::Init& init);
  // streams (B, T, N, C) -> (B, T, C).
  Tensor forward(const Tensor& streams) const;

 private:
  HyperConnectionConfig c_;
  Tensor fn_;     // (N, N C)
  Tensor base_;   // (N)
  Tensor scale_;  // (1)
};

}  // namespace tidal::models
