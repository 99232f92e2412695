#include "tidal/train/nan_guard.h"

#include <cmath>
#include <string>
#include <vector>

#include "tidal/base/error.h"
#include "tidal/dist/communicator.h"
#include "tidal/optim/finite.h"

namespace tidal::train {

std::string nonfinite_step(double loss, double grad_norm, const optim::NamedParameters& params,
                           dist::Communicator* comm) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) return "";
  std::string first = optim::first_nonfinite_grad(params);
  if (comm != nullptr) {  // every rank decides alike (the loss and the norm are global): a collective is safe
    const std::vector<std::string> all = dist::all_gather_strings(*comm, first);
    first.clear();
    for (size_t r = 0; r < all.size() && first.empty(); ++r)
      if (!all[r].empty()) first = all[r] + (all.size() > 1 ? " (rank " + std::to_string(r) + "'s shard)" : "");
  }
  const std::string grads =
      first.empty() ? std::string(" (every gradient is finite)") : " (first non-finite gradient: " + first + ")";
  if (!std::isfinite(loss))
    return detail::str_cat("the loss is ", loss, std::isfinite(grad_norm) ? std::string() : grads);
  return detail::str_cat("the gradient norm is ", grad_norm, grads);
}

void stop_nonfinite(int64_t it, const std::string& what, const TrainArgs& args, const optim::NamedParameters& params) {
  // Before any update (the guard stops ahead of the step), a non-finite weight came with the run's start.
  if (const std::string bad = optim::first_nonfinite_weight(params); !bad.empty())
    detail::throw_error(detail::str_cat(
        "iteration ", it, ": ", what, "; training stopped before the optimizer step. The weights hold NaN or ",
        "infinite values already (first: ", bad, "): ",
        !args.pretrained.empty()        ? "the --pretrained directory " + args.pretrained + " is corrupt"
        : !args.checkpoint.load.empty() ? "the checkpoint loaded from " + args.checkpoint.load + " is corrupt"
                                        : std::string("the weights went bad"),
        "; no --lr fixes that: use an intact copy (--skip-nonfinite-steps skips such steps instead)"));
  detail::throw_error(detail::str_cat(
      "iteration ", it, ": ", what, "; training stopped before the optimizer step, so no weight took it ",
      "(--check-for-nan-in-loss-and-grad). Try a lower --lr (now ", args.schedule.lr,
      "), a longer --lr-warmup-iters or ", "--clip-grad; --skip-nonfinite-steps skips such steps instead"));
}

}  // namespace tidal::train
