#include "tidal/models/hyper_connection.h"

#include "tidal/memory_scope.h"

#include "tidal/autograd/checkpoint.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/norm.h"
#include "tidal/ops/sinkhorn.h"
#include "tidal/ops/softmax.h"
#include "tidal/ops/view.h"

namespace tidal::models {
namespace {

// streams (B, T, N, C) flattened and RMS-normalized without a weight, projected by w (M, N C): (B, T, M).
Tensor mixes(const Tensor& streams, const Tensor& w, double norm_eps) {
  const int64_t b = streams.size(0), t = streams.size(1);
  return linear(rms_norm(streams.reshape({b, t, -1}), Tensor(), norm_eps), w);
}

// sum_n weights_n x_n: weights (B, T, N), streams (B, T, N, C) -> (B, T, C).
Tensor weighted_sum(const Tensor& weights, const Tensor& streams) {
  return matmul(weights.unsqueeze(-2), streams).squeeze(-2);
}

void check_streams(const char* what, const Tensor& streams, const HyperConnectionConfig& c) {
  TIDAL_CHECK(streams.dim() == 4 && streams.size(2) == c.streams && streams.size(3) == c.hidden, "[", what,
              "] expects streams (B, T, hc_mult = ", c.streams, ", hidden = ", c.hidden, "), got ", streams.shape());
}

}  // namespace

HyperConnection::HyperConnection(const HyperConnectionConfig& c, const nn::Init& init) : c_(c) {
  const int64_t n = c.streams, m = (2 + n) * n;
  fn_ = register_parameter("fn", nn::normal_parameter({m, n * c.hidden}, init.std, init));
  base_ = register_parameter("base", nn::constant_parameter({m}, 0.0, init));
  scale_ = register_parameter("scale", nn::constant_parameter({3}, 1.0, init));
}

HyperMappings HyperConnection::collapse(const Tensor& streams, bool recompute) const {
  ModuleScope scope(name());  // --report-memory: the mHC mappings by module
  if (recompute) {            // Note [mHC recompute]
    const std::vector<Tensor> out = autograd::checkpoint(
        [this](const std::vector<Tensor>& in) {
          const HyperMappings m = collapse(in[0]);
          return std::vector<Tensor>{m.post, m.comb, m.collapsed};
        },
        {streams});
    return {out[0], out[1], out[2]};
  }
  check_streams("hyper_connection", streams, c_);
  const int64_t b = streams.size(0), t = streams.size(1), n = c_.streams;
  const std::vector<Tensor> w = split(mixes(streams, fn_, c_.norm_eps), {n, n, n * n}, -1);  // (B, T, n|n|n^2)
  const std::vector<Tensor> base = split(base_, {n, n, n * n}, 0);
  const std::vector<Tensor> scale = split(scale_, {1, 1, 1}, 0);                        // three (1)
  Tensor pre = add(sigmoid(add(mul(w[0], scale[0]), base[0])), c_.eps);                 // (B, T, N)
  Tensor post = mul(sigmoid(add(mul(w[1], scale[1]), base[1])), 2.0);                   // (B, T, N)
  Tensor logits = add(mul(w[2].view({b, t, n, n}), scale[2]), base[2].view({n, n}));    // (B, T, N, N)
  Tensor comb = sinkhorn(add(softmax(logits, -1), c_.eps), c_.sinkhorn_iters, c_.eps);  // (B, T, N, N)
  return {post, comb, weighted_sum(pre, streams)};
}

Tensor HyperConnection::expand(const HyperMappings& m, const Tensor& streams, const Tensor& block_out) {
  Tensor spread = mul(m.post.unsqueeze(-1), block_out.unsqueeze(-2));  // (B, T, N, C)
  Tensor mixed = matmul(m.comb.transpose(-1, -2), streams);            // (B, T, N, C)
  return add(spread, mixed);
}

HyperHead::HyperHead(const HyperConnectionConfig& c, const nn::Init& init) : c_(c) {
  const int64_t n = c.streams;
  fn_ = register_parameter("hc_fn", nn::normal_parameter({n, n * c.hidden}, init.std, init));
  base_ = register_parameter("hc_base", nn::constant_parameter({n}, 0.0, init));
  scale_ = register_parameter("hc_scale", nn::constant_parameter({1}, 1.0, init));
}

Tensor HyperHead::forward(const Tensor& streams) const {
  ModuleScope scope(name());
  check_streams("hyper_head", streams, c_);
  Tensor pre = add(sigmoid(add(mul(mixes(streams, fn_, c_.norm_eps), scale_), base_)), c_.eps);  // (B, T, N)
  return weighted_sum(pre, streams);                                                             // (B, T, C)
}

}  // namespace tidal::models
