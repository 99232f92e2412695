#include "tidal/ops/softmax.h"

#include "tidal/ops/common.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;

// x viewed as (outer, n, inner) around `dim` (a 0-dim tensor is one row of one element).
SoftmaxArgs softmax_args(const Tensor& x, int64_t dim, bool log, const char* op) {
  SoftmaxArgs a;
  a.log = log;
  if (x.dim() == 0) {
    TIDAL_CHECK(dim == 0 || dim == -1, "[", op, "] dim ", dim, " is out of range for a 0-dim tensor");
    return a;
  }
  const int d = normalize_dim(dim, x.dim(), op);
  for (int k = 0; k < x.dim(); ++k) {
    if (k < d)
      a.outer *= x.shape()[k];
    else if (k == d)
      a.n = x.shape()[k];
    else
      a.inner *= x.shape()[k];
  }
  return a;
}

struct SoftmaxBackward : Node {
  SavedTensor out;
  SoftmaxArgs args;
  const char* name() const override { return args.log ? "LogSoftmaxBackward" : "SoftmaxBackward"; }
  TensorList apply(TensorList&& grads) override {
    Tensor y = out.unpack(name());
    Tensor dx = empty(y.shape(), y.dtype(), y.device());
    const Tensor gc = grads[0].contiguous();  // on meta too: the copy a real run makes
    if (Kernels* kern = kernels_for(dx)) kern->softmax_backward(current_stream(dx.device()), dx, gc, y, args);
    return {dx};
  }
  void release_saved() override { out.reset(); }
};

Tensor softmax_op(const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  OpScope scope(op);
  detail::check_floating(op, x);
  const SoftmaxArgs args = softmax_args(x, dim, log, op);
  Tensor out = empty(x.shape(), x.dtype(), x.device());  // contiguous, x's shape
  const Tensor xc = x.detach().contiguous();             // on meta too: the copy a real run makes
  if (Kernels* kern = kernels_for(out)) kern->softmax_forward(current_stream(out.device()), out, xc, args);
  if (autograd::needs_grad(x)) {
    auto node = autograd::make_node<SoftmaxBackward>({&x});
    node->out = SavedTensor(out);
    node->args = args;
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_op(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_op(x, dim, true); }

}  // namespace tidal
