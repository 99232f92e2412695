#include "tidal/nn/deferred_init.h"

#include <cstring>

#include "tidal/base/error.h"
#include "tidal/ops/random.h"

namespace tidal::nn {

void DeferredInit::record_normal(const Tensor& p, double std, const RngState& rng) {
  recipes_[p.storage().get()] = {true, std, rng};
}

void DeferredInit::record_constant(const Tensor& p, double value) { recipes_[p.storage().get()] = {false, value, {}}; }

void DeferredInit::materialize(const Tensor& p) const {
  const auto it = recipes_.find(p.storage().get());
  TIDAL_ASSERT(it != recipes_.end(), "[deferred init] a parameter ", p.shape(), " without a recipe");
  const Recipe& r = it->second;
  Tensor values;  // what building the parameter directly makes (nn/layers.cpp)
  if (r.normal) {
    const RngState outer = get_rng_state();
    set_rng_state(r.rng);
    Tensor t = randn(p.shape(), DType::f32);
    set_rng_state(outer);
    t.mul_(r.value);
    values = t.to(p.dtype()).to(p.device());  // drawn on the host, as nn::normal_parameter draws
  } else {
    values = full(p.shape(), r.value, p.dtype(), p.device());
  }
  p.storage()->rematerialize();
  if (!p.is_meta()) p.detach().copy_(values);  // the device's copy kernel (no autograd: detached)
}

}  // namespace tidal::nn
