#include "tidal/train/main_grads.h"

#include "tidal/autograd/grad_mode.h"
#include "tidal/dist/collectives.h"
#include "tidal/memory_scope.h"
#include "tidal/models/moe.h"

namespace tidal::train {

MainGrads::MainGrads(const std::vector<std::pair<std::string, Tensor>>& params) {
  for (const auto& [name, p] : params)
    if (p.dtype() == DType::bf16 && p.is_leaf()) {
      params_.push_back(p);
      expert_.push_back(models::is_expert_parameter(name));
    }
  sums_.resize(params_.size());
  published_.assign(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i)
    hooks_.push_back(params_[i].add_post_accumulate_grad_hook([this, i] { on_gradient(i); }));
}

MainGrads::~MainGrads() {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].remove_post_accumulate_grad_hook(hooks_[i]);
}

void MainGrads::begin_backward(bool publish) {
  publish_ = publish;
  published_.assign(params_.size(), 0);
}

void MainGrads::on_gradient(size_t i) {
  const Tensor& p = params_[i];
  const Tensor g = p.grad();  // this backward's bf16 gradient
  TIDAL_ASSERT(g.dtype() == DType::bf16, "[bf16] a second gradient for a published f32 sum in one backward");
  p.zero_grad();
  NoGradGuard no_grad;
  if (!sums_[i].defined()) {
    MemoryScope scope(MemoryCategory::gradient);
    sums_[i] = g.to(DType::f32);  // exact: bf16 is a prefix of f32
  } else {
    MemoryScope scope(MemoryCategory::temporary);
    sums_[i].add_(g.to(DType::f32));
  }
  if (publish_) {
    p.set_grad(sums_[i]);
    sums_[i] = Tensor();
    published_[i] = 1;
  }
}

void MainGrads::expose(dist::Communicator& comm, dist::Communicator* expert_data) {
  // Per group: which of its parameters some rank of it has a sum for (every rank of a group lists the
  // same parameters, in the same order).
  // `which`: 0 the dense parameters, 1 the experts', 2 all.
  auto fill = [&](dist::Communicator& group, int which) {
    if (group.size() == 1) return;
    std::vector<size_t> mine;
    for (size_t i = 0; i < params_.size(); ++i)
      if (which == 2 || int(expert_[i]) == which) mine.push_back(i);
    std::string have(mine.size(), '\0');
    for (size_t k = 0; k < mine.size(); ++k) have[k] = sums_[mine[k]].defined() || published_[mine[k]];
    have = dist::any_rank(group, have);
    MemoryScope scope(MemoryCategory::gradient);
    for (size_t k = 0; k < mine.size(); ++k) {
      const size_t i = mine[k];
      if (have[k] && !sums_[i].defined() && !published_[i])
        sums_[i] = zeros(params_[i].shape(), DType::f32, params_[i].device());
    }
  };
  if (expert_data) {
    fill(comm, 0);
    fill(*expert_data, 1);
  } else {
    fill(comm, 2);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (published_[i]) continue;
    params_[i].set_grad(sums_[i]);  // undefined: no gradient this step (an expert no token chose)
    sums_[i] = Tensor();
  }
}

}  // namespace tidal::train
