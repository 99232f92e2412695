#pragma once
// What the estimator tests compare the formulas with: one training step's activation bytes, measured by the
// device allocator.
#include "tidal/allocator.h"
#include "tidal/models/causal_lm.h"

namespace tidal::testing {

struct MeasuredActivations {
  int64_t peak = 0, after_forward = 0;
};

// One forward and backward of (B, T + 1) tokens: the activation peak and the bytes held after the loss, less what was
// live before; the model's gradients are zeroed after.
inline MeasuredActivations measure_activations(models::CausalLM& model, const Tensor& tokens) {
  Allocator& dev = device_allocator(Device::cpu());
  const int64_t t = tokens.size(1) - 1;
  Tensor ids = tokens.narrow(1, 0, t).contiguous(), targets = tokens.narrow(1, 1, t).contiguous();
  const int64_t base = dev.stats()[MemoryCategory::activation].allocated;
  dev.reset_peak_stats();
  MeasuredActivations m;
  {
    Tensor loss = models::causal_lm_loss(model.forward(ids), targets, model.config().router_aux_loss_coef);
    m.after_forward = dev.stats()[MemoryCategory::activation].allocated - base;
    loss.backward();
  }
  m.peak = dev.stats()[MemoryCategory::activation].peak - base;
  model.zero_grad();
  return m;
}

}  // namespace tidal::testing
