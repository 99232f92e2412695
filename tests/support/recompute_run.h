#pragma once
// One training step of the recompute tests: two micro-batches accumulated, with the loss, every parameter's
// gradient, the activation bytes kept at the end of the first forward and the recomputes that ran.
#include <vector>

#include "tidal/autograd/checkpoint.h"
#include "tidal/autograd/checkpoint_without_output.h"
#include "tidal/memory/offload.h"
#include "tidal/models/causal_lm.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/loss.h"
#include "tidal/ops/random.h"

namespace tidal::testing {

struct RecomputeRun {
  double loss = 0;
  std::vector<Tensor> grads;
  int64_t saved_after_forward = 0;  // activation bytes at the end of the first forward
  int64_t recomputes = 0;           // checkpoint replays + output recomputes
};

inline int64_t activation_bytes() {
  return device_allocator(Device::cpu()).stats()[MemoryCategory::activation].allocated;
}
inline int64_t recompute_events() { return autograd::checkpoint_replay_count() + autograd::output_recompute_count(); }

// batch (4, T + 1): two micro-batches of 2 x T tokens, each seeded (dropout draws the same masks), the loss halved;
// `off` (optional) starts each micro-batch's offload.
inline RecomputeRun run_two_micro_batches(models::CausalLM& model, const Tensor& batch,
                                          memory::Offloader* off = nullptr) {
  RecomputeRun r;
  const int64_t events = recompute_events();
  for (int64_t mb = 0; mb < 2; ++mb) {
    Tensor tokens = batch.narrow(0, mb * 2, 2);
    const int64_t t = tokens.size(1) - 1;
    if (off != nullptr) off->begin_micro_batch();
    manual_seed(100 + uint64_t(mb));
    const int64_t base = activation_bytes();
    Tensor loss = causal_lm_loss(model.forward(tokens.narrow(1, 0, t)), tokens.narrow(1, 1, t),
                                 model.config().router_aux_loss_coef);
    if (mb == 0) r.saved_after_forward = activation_bytes() - base;
    mul(loss, 0.5).backward();
    r.loss += loss.item<double>();
  }
  for (const Tensor& p : model.parameters()) r.grads.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  model.zero_grad();
  r.recomputes = recompute_events() - events;
  return r;
}

}  // namespace tidal::testing
