#include "tidal/parallel/expert.h"

#include <cmath>
#include <vector>

#include "tidal/base/error.h"
#include "tidal/dist/collectives.h"
#include "tidal/models/moe.h"
#include "tidal/optim/grad_clip.h"

namespace tidal::parallel {

double clip_grad_norm(const std::vector<std::pair<std::string, Tensor>>& params, dist::Communicator* experts,
                      double max_norm) {
  std::vector<Tensor> dense, local;
  for (const auto& [name, p] : params)
    (experts != nullptr && models::is_expert_parameter(name) ? local : dense).push_back(p);
  // Without experts elsewhere this is optim::clip_grad_norm's sum, bit for bit (+ 0.0 is exact).
  const double squares = optim::grad_sum_of_squares(dense) +
                         (experts != nullptr ? dist::all_reduce_sum(*experts, optim::grad_sum_of_squares(local)) : 0.0);
  const double norm = std::sqrt(squares);
  std::vector<Tensor> all = dense;
  all.insert(all.end(), local.begin(), local.end());
  optim::scale_gradients(all, optim::clip_coefficient(norm, max_norm));  // as clip_grad_norm does
  return norm;
}

}  // namespace tidal::parallel
