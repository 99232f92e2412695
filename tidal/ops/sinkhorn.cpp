#include "tidal/ops/sinkhorn.h"

#include "tidal/ops/common.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;

struct SinkhornBackward : Node {
  SavedTensor x;
  SinkhornArgs args;
  const char* name() const override { return "SinkhornBackward"; }
  TensorList apply(TensorList&& grads) override {
    Tensor xs = x.unpack(name());
    Tensor dx = empty(xs.shape(), xs.dtype(), xs.device());
    const Tensor gc = grads[0].contiguous();  // on meta too: the copy a real run makes
    if (Kernels* kern = kernels_for(dx)) kern->sinkhorn_backward(current_stream(dx.device()), dx, gc, xs, args);
    return {dx};
  }
  void release_saved() override { x.reset(); }
};

}  // namespace

Tensor sinkhorn(const Tensor& x, int64_t iters, double eps) {
  OpScope scope("sinkhorn");
  detail::check_floating("sinkhorn", x);
  TIDAL_CHECK(x.dim() >= 2 && x.size(-1) == x.size(-2), "[sinkhorn] expects square matrices (..., n, n), got ",
              x.shape());
  TIDAL_CHECK(iters >= 1, "[sinkhorn] needs at least one iteration, got ", iters);
  TIDAL_CHECK(eps >= 0.0, "[sinkhorn] eps must be >= 0, got ", eps);
  SinkhornArgs args;
  args.n = x.size(-1);
  args.matrices = args.n == 0 ? 0 : x.numel() / (args.n * args.n);
  args.iters = iters;
  args.eps = eps;
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  const Tensor xc = x.detach().contiguous();  // on meta too: the copy a real run makes
  if (Kernels* kern = kernels_for(out)) kern->sinkhorn_forward(current_stream(out.device()), out, xc, args);
  if (autograd::needs_grad(x)) {
    auto node = autograd::make_node<SinkhornBackward>({&x});
    node->x = SavedTensor(xc);
    node->args = args;
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace tidal
