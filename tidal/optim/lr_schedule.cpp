#include "tidal/optim/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "tidal/base/error.h"

namespace tidal::optim {

LrDecayStyle parse_lr_decay_style(const std::string& name) {
  if (name == "constant") return LrDecayStyle::constant;
  if (name == "linear") return LrDecayStyle::linear;
  if (name == "cosine") return LrDecayStyle::cosine;
  detail::throw_error(detail::str_cat("[lr] unknown lr decay style '", name, "'; valid are constant, linear, cosine"));
}

const char* lr_decay_style_name(LrDecayStyle style) {
  switch (style) {
    case LrDecayStyle::constant: return "constant";
    case LrDecayStyle::linear: return "linear";
    case LrDecayStyle::cosine: return "cosine";
  }
  return "?";
}

void validate(const LrSchedule& s) {
  TIDAL_CHECK(s.lr >= 0 && s.min_lr >= 0 && s.warmup_init >= 0, "[lr] lr, min_lr and warmup_init must be >= 0, got ",
              s.lr, ", ", s.min_lr, ", ", s.warmup_init);
  TIDAL_CHECK(s.min_lr <= s.lr, "[lr] min_lr ", s.min_lr, " exceeds lr ", s.lr);
  TIDAL_CHECK(s.warmup_iters >= 0 && s.decay_iters >= 0 && s.train_iters >= 0,
              "[lr] warmup_iters, decay_iters and train_iters must be >= 0, got ", s.warmup_iters, ", ", s.decay_iters,
              ", ", s.train_iters);
  if (s.style == LrDecayStyle::constant) return;
  const int64_t decay = s.decay_iters > 0 ? s.decay_iters : s.train_iters;
  TIDAL_CHECK(decay > 0, "[lr] ", lr_decay_style_name(s.style), " decay needs decay_iters or train_iters > 0");
  TIDAL_CHECK(s.warmup_iters < decay, "[lr] warmup_iters ", s.warmup_iters, " must be below the decay iterations ",
              decay);
}

double lr_at(int64_t iteration, const LrSchedule& s) {
  validate(s);
  const int64_t i = std::max<int64_t>(iteration, 0), w = s.warmup_iters;
  if (w > 0 && i <= w) return s.warmup_init + (s.lr - s.warmup_init) * double(i) / double(w);
  if (s.style == LrDecayStyle::constant) return s.lr;
  const int64_t d = s.decay_iters > 0 ? s.decay_iters : s.train_iters;
  if (i > d) return s.min_lr;
  const double r = double(i - w) / double(d - w);
  const double coeff = s.style == LrDecayStyle::linear ? 1.0 - r : 0.5 * (std::cos(std::numbers::pi * r) + 1.0);
  return s.min_lr + coeff * (s.lr - s.min_lr);
}

}  // namespace tidal::optim
