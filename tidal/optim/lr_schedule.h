#pragma once
// Megatron-LM's learning-rate schedule (OptimizerParamScheduler.get_lr), in iterations.
//
// lr_at(i, s) is the learning rate of the optimizer step of iteration i (0-based: Megatron's
// num_steps when that step runs, which is 0 for the first step), with W = warmup_iters,
// D = decay_iters (train_iters when 0):
//   i <= W and W > 0:   lr = warmup_init + (lr - warmup_init) * i / W          (linear warmup)
//   style constant:     lr
//   i > D:              min_lr
//   otherwise, with r = (i - W) / (D - W) in [0, 1]:
//     linear:           min_lr + (lr - min_lr) * (1 - r)
//     cosine:           min_lr + (lr - min_lr) * 0.5 * (cos(pi * r) + 1)
// So the first step of a warmup runs at warmup_init (0 by default), as in Megatron.
#include <cstdint>
#include <string>

namespace tidal::optim {

enum class LrDecayStyle { constant, linear, cosine };

// "constant", "linear", "cosine" (Megatron's --lr-decay-style); throws listing them otherwise.
LrDecayStyle parse_lr_decay_style(const std::string& name);
const char* lr_decay_style_name(LrDecayStyle style);

struct LrSchedule {
  double lr = 0;             // --lr: the peak
  double min_lr = 0;         // --min-lr
  double warmup_init = 0;    // --lr-warmup-init
  int64_t warmup_iters = 0;  // --lr-warmup-iters
  int64_t decay_iters = 0;   // --lr-decay-iters (0: train_iters)
  int64_t train_iters = 0;   // --train-iters
  LrDecayStyle style = LrDecayStyle::cosine;
};

// Throws naming the field when the schedule is inconsistent (negative values, min_lr > lr, no decay
// iterations, warmup not shorter than the decay).
void validate(const LrSchedule& s);
double lr_at(int64_t iteration, const LrSchedule& s);

}  // namespace tidal::optim
