#include "tidal/train/nan_guard.h"

#include <cmath>

#include "tidal/base/error.h"
#include "tidal/optim/finite.h"

namespace tidal::train {

std::string nonfinite_step(double loss, double grad_norm, const optim::NamedParameters& params) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) return "";
  const std::string first = optim::first_nonfinite_grad(params);
  const std::string grads =
      first.empty() ? std::string(" (every gradient is finite)") : " (first non-finite gradient: " + first + ")";
  if (!std::isfinite(loss))
    return detail::str_cat("the loss is ", loss, std::isfinite(grad_norm) ? std::string() : grads);
  return detail::str_cat("the gradient norm is ", grad_norm, grads);
}

void stop_nonfinite(int64_t it, const std::string& what, const TrainArgs& args) {
  detail::throw_error(detail::str_cat(
      "iteration ", it, ": ", what, "; training stopped before the optimizer step, so no weight took it ",
      "(--check-for-nan-in-loss-and-grad). Try a lower --lr (now ", args.lr, "), a longer --lr-warmup-iters or ",
      "--clip-grad; --skip-nonfinite-steps skips such steps instead"));
}

}  // namespace tidal::train
