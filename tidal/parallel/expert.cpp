#include "tidal/parallel/expert.h"

#include <cmath>
#include <vector>

#include "tidal/base/error.h"
#include "tidal/dist/collectives.h"
#include "tidal/models/moe.h"
#include "tidal/optim/grad_clip.h"

namespace tidal::parallel {

void check_expert_parallel(int expert_parallel, const models::ModelConfig& model, int ranks) {
  const int e = expert_parallel;
  if (e == 1) return;
  TIDAL_CHECK(model.is_moe(), "tidal train: --expert-model-parallel-size ", e,
              " divides the experts of MoE layers, but the model (", model.model_type,
              ") has none: give 1, or a MoE model (e.g. --model tiny-qwen3-moe)");
  TIDAL_CHECK(ranks % e == 0, "tidal train: --expert-model-parallel-size ", e, " does not divide the ", ranks,
              " ranks: the ranks are data-parallel groups of ", e, " expert-parallel ranks");
  TIDAL_CHECK(model.num_experts % e == 0, "tidal train: --expert-model-parallel-size ", e,
              " does not divide the model's ", model.num_experts, " experts (num_experts): each rank holds ",
              "num_experts / E of them");
}

ExpertGroups make_expert_groups(dist::Communicator& comm, int expert_parallel) {
  const int n = comm.size(), e = expert_parallel, rank = comm.rank();
  TIDAL_ASSERT(e >= 1 && n % e == 0, "[expert parallel] ", e, " ranks per group do not divide ", n);
  std::vector<int> block, strided;
  for (int r = rank / e * e; r < rank / e * e + e; ++r) block.push_back(r);
  for (int r = rank % e; r < n; r += e) strided.push_back(r);
  ExpertGroups g;
  g.experts = comm.subgroup(block);
  g.expert_data = comm.subgroup(strided);
  return g;
}

double clip_grad_norm_expert_parallel(const std::vector<std::pair<std::string, Tensor>>& params,
                                      dist::Communicator& experts, double max_norm) {
  std::vector<Tensor> dense, local;
  for (const auto& [name, p] : params) (models::is_expert_parameter(name) ? local : dense).push_back(p);
  const double squares =
      optim::grad_sum_of_squares(dense) + dist::all_reduce_sum(experts, optim::grad_sum_of_squares(local));
  const double norm = std::sqrt(squares);
  std::vector<Tensor> all = dense;
  all.insert(all.end(), local.begin(), local.end());
  optim::scale_gradients(all, optim::clip_coefficient(norm, max_norm));  // as clip_grad_norm does
  return norm;
}

}  // namespace tidal::parallel
