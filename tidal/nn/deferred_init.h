#pragma once
// Parameters made without their values, for a model whose whole parameters need not fit at once
// (ZeRO-3 builds its model so: parallel/param_gather.h). A parameter built under an Init with a
// DeferredInit gets its bytes released at once and a recipe — the generator's position for a normal
// draw, or a constant — and materialize() later writes exactly the values building it directly would
// have: the generator is counter-based (rng.h), so a draw depends only on its position, and building
// reserves the same positions either way.
#include <memory>
#include <unordered_map>

#include "tidal/rng.h"
#include "tidal/tensor.h"

namespace tidal::nn {

class DeferredInit {
 public:
  // normal(0, std) drawn from `rng` (as f32, then converted to the parameter's dtype), or `value`.
  void record_normal(const Tensor& p, double std, const RngState& rng);
  void record_constant(const Tensor& p, double value);
  // Allocates p's bytes again and writes its initial values (a parameter this object recorded).
  void materialize(const Tensor& p) const;

 private:
  struct Recipe {
    bool normal = false;
    double value = 0;  // std of a normal draw, or the constant
    RngState rng;
  };
  std::unordered_map<const Storage*, Recipe> recipes_;
};

}  // namespace tidal::nn
