#include "tidal/optim/grad_clip.h"

#include <cmath>

#include "tidal/autograd/grad_mode.h"
#include "tidal/backend/kernels.h"
#include "tidal/memory_scope.h"

namespace tidal::optim {

double grad_norm(const std::vector<Tensor>& params) {
  OpScope op("grad_norm");
  double sum = 0;
  for (const Tensor& p : params) {
    TIDAL_CHECK(p.defined(), "[clip_grad_norm] an undefined parameter");
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    if (Kernels* kern = kernels_for(g)) sum += kern->sum_of_squares(g.contiguous());
  }
  return std::sqrt(sum);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  const double norm = grad_norm(params);
  // PyTorch multiplies by min(coef, 1); scaling by exactly 1 changes nothing, so skip it.
  const double coef = max_norm / (norm + 1e-6);
  if (max_norm <= 0 || !(coef < 1.0)) return norm;
  OpScope op("clip_grad_norm");
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) g.mul_(coef);
  }
  return norm;
}

}  // namespace tidal::optim
