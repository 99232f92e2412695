#pragma once
// AdamW (Loshchilov & Hutter, 2019) exactly as torch.optim.AdamW (foreach=False) computes it, so a
// tidal run and a PyTorch run on the same weights follow the same loss curve. For each parameter p
// with gradient g, at its own step count t (1 at its first update):
//   p  *= 1 - lr * weight_decay                       (decoupled decay; 0 for no-decay params)
//   m   = beta1 * m + (1 - beta1) * g
//   v   = beta2 * v + (1 - beta2) * g^2
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
//   p  -= lr / (1 - beta1^t) * m / denom
// One fused pass per parameter reads p, g, m, v once and writes them once (no temporaries); a step
// hands every parameter to the device at once (Kernels::adamw_multi_step: one multi-tensor kernel
// launch per few dozen tensors on CUDA, a loop over the per-tensor kernel elsewhere).
//
// States (m, v, and an f32 master copy of a bf16 parameter) are created lazily at a parameter's
// first update, in f32 (f64 for f64 parameters), under MemoryScope(optimizer_state), on the
// parameter's device: on meta they are accounted but own no bytes and no kernel runs. A bf16
// parameter is updated through its master copy and written back rounded to nearest even, so small
// updates are not lost to bf16 rounding (mixed-precision training's fp32 master weights). Its
// gradient may be bf16 or f32 (--bf16's f32 sums over the micro-batches, train/main_grads.h): the
// same f32 arithmetic either way.
//
// Parameters without a gradient (an MoE expert no token was routed to) are skipped exactly as
// PyTorch skips `p.grad is None`: no decay, no state change, their step count does not advance.
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tidal/tensor.h"

namespace tidal::optim {

struct AdamWOptions {
  double lr = 1e-3;  // used by step() without an argument
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// Megatron's and Hugging Face's rule: biases and 1-D parameters (norm weights, biases) get no weight
// decay; matrices and embeddings do.
bool default_weight_decay(const std::string& name, const Tensor& param);

using NamedParameters = std::vector<std::pair<std::string, Tensor>>;
using DecayRule = std::function<bool(const std::string& name, const Tensor& param)>;

// Subclasses choose where the states live and how the step walks the parameters (the swap
// optimizer, tidal/memory/swap_optimizer.h, keeps them in host memory); the arithmetic stays here.
class AdamW {
 public:
  // `params` must have unique names; `decay` decides per parameter whether weight decay applies.
  AdamW(NamedParameters params, AdamWOptions options = {}, const DecayRule& decay = default_weight_decay);
  virtual ~AdamW() = default;
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update of every parameter that has a gradient, with learning rate `lr`.
  virtual void step(double lr);
  void step() { step(options_.lr); }
  // Drops every parameter's gradient (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad() const;

  const AdamWOptions& options() const { return options_; }
  int64_t steps() const { return steps_; }  // calls of step()
  size_t size() const { return slots_.size(); }
  bool decays(const std::string& name) const;
  // The parameter's own update count (0 before its first gradient).
  int64_t param_steps(const std::string& name) const;
  // Bytes of optimizer state created so far (what MemoryCategory::optimizer_state holds for us).
  int64_t state_bytes() const;
  // Where the states live, for the training log: "on the device" (the swap optimizer names its windows).
  virtual std::string describe() const;
  // The optimizer's own statistics for --metrics-json's summary: none here (null); the swap
  // optimizer's windows and copies.
  virtual nlohmann::json stats_json() const;

  // Checkpoint form: "<name>.exp_avg", "<name>.exp_avg_sq", "<name>.master" (bf16 parameters) and
  // "<name>.step" (i64, shape ()) for each parameter updated at least once, plus "step" (i64, ()),
  // the number of step() calls. Tensors are the live states (no copies).
  std::map<std::string, Tensor> state_dict() const;
  // Restores what state_dict() returned (values are copied into fresh optimizer_state tensors).
  // Throws naming the entry on an unknown parameter, a missing tensor, or a shape or dtype mismatch.
  void load_state_dict(const std::map<std::string, Tensor>& state);

 protected:
  struct Slot {
    std::string name;
    Tensor param;
    bool decay = true;
    int64_t step = 0;
    Tensor exp_avg, exp_avg_sq, master;  // undefined until the first update
  };
  // Creates s's states: zeros, and the master copy of a bf16 parameter. Here: on the parameter's
  // device, as optimizer_state.
  virtual void init_state(Slot& s) const;
  // Starts the update of s: its gradient, checked against the parameter, or undefined when it has
  // none (then s is skipped). Otherwise creates s's states if needed and advances its step count.
  Tensor begin_update(Slot& s);
  // One tensor of an update: (a contiguous range of) slot's elements. param, grad and the states are
  // views of the same elements; the arithmetic does not depend on the range.
  struct Update {
    const Slot* slot = nullptr;
    Tensor param, grad, exp_avg, exp_avg_sq, master;
  };
  // The fused AdamW updates of `updates`, all of them in one call of the device's multi-tensor kernel
  // (Kernels::adamw_multi_step; per device when they are on several). Independent tensors: the bits
  // of each equal its own update alone.
  void update(std::span<const Update> updates, double lr) const;
  static void check_lr(double lr);

  AdamWOptions options_;
  std::vector<Slot> slots_;
  int64_t steps_ = 0;

 private:
  const Slot& find(const std::string& name) const;
};

}  // namespace tidal::optim
