#include "tidal/optim/finite.h"

#include <cmath>

#include "tidal/memory_scope.h"
#include "tidal/optim/grad_clip.h"

namespace tidal::optim {

bool all_finite(const Tensor& t) {
  if (!t.defined() || t.is_meta() || !is_floating(t.dtype()) || t.numel() == 0) return true;
  OpScope op("all_finite");
  for (double chunk : sum_of_squares_chunks(t.contiguous()))
    if (!std::isfinite(chunk)) return false;
  return true;
}

std::string first_nonfinite_grad(const NamedParameters& params) {
  for (const auto& [name, p] : params)
    if (!all_finite(p.grad())) return name;
  return "";
}

std::string first_nonfinite_weight(const NamedParameters& params) {
  for (const auto& [name, p] : params)  // ZeRO-3 holds most parameters released between its gathers: skipped
    if (p.storage() && p.storage()->is_materialized() && !all_finite(p)) return name;
  return "";
}

}  // namespace tidal::optim
