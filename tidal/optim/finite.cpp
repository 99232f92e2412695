#include "tidal/optim/finite.h"

#include <cmath>

#include "tidal/backend/kernels.h"
#include "tidal/memory_scope.h"

namespace tidal::optim {

bool all_finite(const Tensor& t) {
  if (!t.defined() || t.is_meta() || !is_floating(t.dtype()) || t.numel() == 0) return true;
  OpScope op("all_finite");
  Kernels* kern = kernels_for(t);
  return kern == nullptr || std::isfinite(kern->sum_of_squares(t.contiguous()));
}

std::string first_nonfinite_grad(const NamedParameters& params) {
  for (const auto& [name, p] : params)
    if (!all_finite(p.grad())) return name;
  return "";
}

}  // namespace tidal::optim
