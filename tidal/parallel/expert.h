#pragma once
// Expert parallelism of `tidal train` (--expert-model-parallel-size E, Megatron's layout without tensor
// or pipeline parallelism; docs/distributed.md "Expert parallel"): the N ranks form N/E expert-parallel
// groups of E contiguous ranks {kE, …, kE+E-1}, which divide each MoE layer's experts among them
// (models/moe.h), and E expert-data-parallel groups {j, j+E, j+2E, …}, which hold the same experts and
// sum their gradients (parallel/groups.h makes them). Everything else (attention, router, embeddings,
// norms) stays data-parallel over all N ranks.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tidal/dist/communicator.h"
#include "tidal/models/config.h"
#include "tidal/tensor.h"

namespace tidal::parallel {

// optim::clip_grad_norm of the whole model's gradients, summed over the ranks already. With `experts`
// (expert parallelism: this rank holds only its experts) the squares of the dense gradients (the same
// on every rank) plus those of the experts of every rank of the expert-parallel group, each expert
// once (a collective over it); null: every parameter is here, optim::clip_grad_norm bit for bit.
// Returns the norm.
double clip_grad_norm(const std::vector<std::pair<std::string, Tensor>>& params, dist::Communicator* experts,
                      double max_norm);

}  // namespace tidal::parallel
