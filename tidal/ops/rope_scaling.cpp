// The rope types' frequencies, each as transformers computes it (modeling_rope_utils.py,
// _compute_{linear_scaling,dynamic_ntk,llama3,yarn}_parameters), step for step, in f64.
#include "tidal/ops/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "tidal/base/error.h"

namespace tidal {
namespace {

constexpr double kPi = std::numbers::pi;

std::vector<double> standard_inv_freq(int64_t dim, double base) {
  std::vector<double> f(size_t(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) f[size_t(i)] = 1.0 / std::pow(base, double(2 * i) / double(dim));
  return f;
}

void llama3(std::vector<double>& f, const RopeScaling& s) {
  const double orig = double(s.original_max_position_embeddings);
  const double low_wavelen = orig / s.low_freq_factor, high_wavelen = orig / s.high_freq_factor;
  for (double& inv : f) {
    const double wavelen = 2 * kPi / inv;
    if (wavelen > low_wavelen) {
      inv /= s.factor;                       // low frequencies: interpolated
    } else if (!(wavelen < high_wavelen)) {  // between: a smooth mix (high frequencies stay)
      const double smooth = (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      inv = (1 - smooth) * inv / s.factor + smooth * inv;
    }
  }
}

RopeFrequencies yarn(int64_t dim, double base, const RopeScaling& s) {
  RopeFrequencies r;
  if (s.attention_factor > 0)
    r.attention_scaling = s.attention_factor;
  else if (s.mscale != 0 && s.mscale_all_dim != 0)
    r.attention_scaling = yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim);
  else
    r.attention_scaling = yarn_mscale(s.factor, 1.0);
  const double orig = double(s.original_max_position_embeddings);
  // The dimension at which a frequency turns `rotations` times over the original length.
  auto correction_dim = [&](double rotations) {
    return double(dim) * std::log(orig / (rotations * 2 * kPi)) / (2 * std::log(base));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  r.inv_freq = standard_inv_freq(dim, base);
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1 - ramp;  // 1: the frequency is kept, 0: interpolated by factor
    double& inv = r.inv_freq[size_t(i)];
    inv = inv / s.factor * (1 - extrapolation) + inv * extrapolation;
  }
  return r;
}

}  // namespace

const char* rope_type_name(RopeType t) {
  switch (t) {
    case RopeType::standard: return "default";
    case RopeType::linear: return "linear";
    case RopeType::dynamic: return "dynamic";
    case RopeType::yarn: return "yarn";
    case RopeType::llama3: return "llama3";
  }
  return "?";
}

bool parse_rope_type(const std::string& name, RopeType* out) {
  for (RopeType t : {RopeType::standard, RopeType::linear, RopeType::dynamic, RopeType::yarn, RopeType::llama3})
    if (name == rope_type_name(t)) {
      *out = t;
      return true;
    }
  return false;
}

RopeFrequencies rope_frequencies(int64_t head_dim, double theta, const RopeScaling& s, int64_t seq_len) {
  TIDAL_CHECK(head_dim > 0 && head_dim % 2 == 0, "[rope] head_dim must be a positive even number, got ", head_dim);
  TIDAL_CHECK(std::isfinite(theta) && theta > 0, "[rope] rope_theta must be a positive number, got ", theta);
  const char* type = rope_type_name(s.type);
  if (s.type != RopeType::standard) {
    TIDAL_CHECK(std::isfinite(s.factor) && s.factor > 0, "[rope] rope type ", type,
                ": factor must be a positive number, got ", s.factor);
  }
  if (s.type == RopeType::dynamic || s.type == RopeType::yarn || s.type == RopeType::llama3)
    TIDAL_CHECK(s.original_max_position_embeddings > 0, "[rope] rope type ", type,
                ": original_max_position_embeddings must be positive, got ", s.original_max_position_embeddings);
  RopeFrequencies r;
  switch (s.type) {
    case RopeType::standard: r.inv_freq = standard_inv_freq(head_dim, theta); break;
    case RopeType::linear:
      r.inv_freq = standard_inv_freq(head_dim, theta);
      for (double& f : r.inv_freq) f /= s.factor;
      break;
    case RopeType::dynamic: {
      const double orig = double(s.original_max_position_embeddings);
      const double len = std::max(double(seq_len), orig);
      double base = theta;
      if (len > orig) {  // at len == orig the multiplier is exactly 1
        TIDAL_CHECK(head_dim > 2, "[rope] rope type dynamic needs head_dim > 2, got ", head_dim);
        base *= std::pow(s.factor * len / orig - (s.factor - 1), double(head_dim) / double(head_dim - 2));
      }
      r.inv_freq = standard_inv_freq(head_dim, base);
      break;
    }
    case RopeType::llama3:
      TIDAL_CHECK(s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor,
                  "[rope] rope type llama3 needs 0 < low_freq_factor < high_freq_factor, got ", s.low_freq_factor,
                  " and ", s.high_freq_factor);
      r.inv_freq = standard_inv_freq(head_dim, theta);
      llama3(r.inv_freq, s);
      break;
    case RopeType::yarn:
      TIDAL_CHECK(s.beta_fast > 0 && s.beta_slow > 0 && std::isfinite(s.beta_fast) && std::isfinite(s.beta_slow),
                  "[rope] rope type yarn needs positive beta_fast and beta_slow, got ", s.beta_fast, " and ",
                  s.beta_slow);
      TIDAL_CHECK(std::isfinite(s.attention_factor) && s.attention_factor >= 0 && std::isfinite(s.mscale) &&
                      std::isfinite(s.mscale_all_dim),
                  "[rope] rope type yarn: attention_factor, mscale and mscale_all_dim must be finite and "
                  "attention_factor >= 0, got ",
                  s.attention_factor, ", ", s.mscale, ", ", s.mscale_all_dim);
      r = yarn(head_dim, theta, s);
      break;
  }
  return r;
}

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

}  // namespace tidal
