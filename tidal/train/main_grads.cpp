#include "tidal/train/main_grads.h"

#include "tidal/autograd/grad_mode.h"
#include "tidal/dist/collectives.h"
#include "tidal/memory_scope.h"

namespace tidal::train {

MainGrads::MainGrads(std::vector<Tensor> params) {
  for (Tensor& p : params)
    if (p.dtype() == DType::bf16 && p.is_leaf()) params_.push_back(std::move(p));
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

void MainGrads::expose(dist::Communicator& comm) {
  if (comm.size() > 1) {
    std::string have(params_.size(), '\0');
    for (size_t i = 0; i < params_.size(); ++i) have[i] = sums_[i].defined() || published_[i];
    have = dist::any_rank(comm, have);
    MemoryScope scope(MemoryCategory::gradient);
    for (size_t i = 0; i < params_.size(); ++i)
      if (have[i] && !sums_[i].defined() && !published_[i])
        sums_[i] = zeros(params_[i].shape(), DType::f32, params_[i].device());
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (published_[i]) continue;
    params_[i].set_grad(sums_[i]);  // undefined: no gradient this step (an expert no token chose)
    sums_[i] = Tensor();
  }
}

}  // namespace tidal::train
