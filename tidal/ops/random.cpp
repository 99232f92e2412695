#include "tidal/ops/random.h"

#include "tidal/backend/kernels.h"
#include "tidal/ops/common.h"
#include "tidal/ops/elementwise.h"

namespace tidal {
namespace {

Tensor generate(const char* op, const Shape& shape, DType dtype, Device device, Distribution dist) {
  OpScope scope(op);
  Tensor out = empty(shape, dtype, device);
  const RngState st = get_rng_state();
  const uint64_t start = reserve_random(uint64_t(out.numel()));
  if (Kernels* kern = kernels_for(out)) kern->random_fill(out, dist, st.seed, start);
  return out;
}

struct DropoutBackward : autograd::Node {
  autograd::SavedTensor mask;
  double scale = 1.0;
  const char* name() const override { return "DropoutBackward"; }
  autograd::TensorList apply(autograd::TensorList&& grads) override {
    Tensor m = mask.unpack(name());
    Tensor g = grads[0].contiguous();
    Tensor out = empty(g.shape(), g.dtype(), g.device());
    if (Kernels* kern = kernels_for(out)) kern->dropout_backward(out, g, m, scale);
    return {out};
  }
  void release_saved() override { mask.reset(); }
};

}  // namespace

Tensor rand(const Shape& shape, DType dtype, Device device) {
  return generate("rand", shape, dtype, device, Distribution::uniform);
}

Tensor randn(const Shape& shape, DType dtype, Device device) {
  return generate("randn", shape, dtype, device, Distribution::normal);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype, Device device) {
  OpScope scope("randint");
  TIDAL_CHECK(high > low, "[randint] empty range [", low, ", ", high, ")");
  Tensor out = empty(shape, dtype, device);
  const RngState st = get_rng_state();
  const uint64_t start = reserve_random(uint64_t(out.numel()));
  if (Kernels* kern = kernels_for(out)) kern->randint_fill(out, low, high, st.seed, start);
  return out;
}

Tensor dropout(const Tensor& x, double p, bool training) {
  OpScope scope("dropout");
  detail::check_floating("dropout", x);
  TIDAL_CHECK(p >= 0.0 && p < 1.0, "[dropout] probability must be in [0, 1), got ", p);
  if (!training || p == 0.0) return x;
  const RngState st = get_rng_state();
  const uint64_t start = reserve_random(uint64_t(x.numel()));
  Tensor mask = empty(x.shape(), DType::u8, x.device());
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  const double scale = 1.0 / (1.0 - p);
  const Tensor xc = x.detach().contiguous();  // on meta too: the copy a real run makes
  if (Kernels* kern = kernels_for(out)) kern->dropout_forward(out, mask, xc, p, scale, st.seed, start);
  if (autograd::needs_grad(x)) {
    auto node = autograd::make_node<DropoutBackward>({&x});
    node->mask = autograd::SavedTensor(mask);
    node->scale = scale;
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace tidal
