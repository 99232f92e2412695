#pragma once
// For the attention tests: q/k/v leaves and one call's output with its q/k/v gradients.
#include <vector>

#include "tidal/ops/attention.h"
#include "tidal/rng.h"
#include "tidal/tensor.h"

namespace tidal::testing {

struct Qkv {
  Tensor q, k, v;  // (B, H, L, D) leaves
};

// out, dq, dk, dv of one call with output gradient g, dropout drawn from RNG state st.
inline std::vector<Tensor> attention_grads(const Qkv& x, const Tensor& g, const AttentionOptions& opt,
                                           const RngState& st) {
  set_rng_state(st);
  for (const Tensor* t : {&x.q, &x.k, &x.v}) t->zero_grad();
  Tensor out = scaled_dot_product_attention(x.q, x.k, x.v, opt);
  out.backward(g);
  return {out, x.q.grad(), x.k.grad(), x.v.grad()};
}

}  // namespace tidal::testing
