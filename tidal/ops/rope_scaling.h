#pragma once
// RoPE frequency scaling: the rope types of Hugging Face's config.json (`rope_scaling` in transformers 4.x,
// `rope_parameters` in 5.x) that the families tidal builds use, computed as transformers' ROPE_INIT_FUNCTIONS
// compute them (modeling_rope_utils.py), once on the host, in f64 (transformers: f32).
#include <cstdint>
#include <string>
#include <vector>

namespace tidal {

enum class RopeType { standard, linear, dynamic, yarn, llama3 };

// The config.json name of a rope type ("default" for standard) and back; the parse returns false for an
// unknown name.
const char* rope_type_name(RopeType t);
bool parse_rope_type(const std::string& name, RopeType* out);

// What a config says about the scaling, with transformers' defaults. Which fields a type reads:
//   linear:  factor (inv_freq / factor)
//   dynamic: factor, original_max_position_embeddings (the config's max_position_embeddings): NTK base
//            theta * (factor * L / orig - (factor - 1))^(D / (D - 2)) for a run of L > orig positions, else
//            the standard frequencies (transformers' fresh-model rule: it recomputes from the longest
//            position seen; tidal runs never exceed max_position_embeddings, so this is the standard table)
//   llama3:  factor, low_freq_factor, high_freq_factor, original_max_position_embeddings
//   yarn:    factor, original_max_position_embeddings, beta_fast, beta_slow, truncate, and the cos/sin
//            factor: attention_factor, else mscale / mscale_all_dim as yarn_get_mscale, else 0.1 ln(factor) + 1
struct RopeScaling {
  RopeType type = RopeType::standard;
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0, beta_slow = 1.0;
  double mscale = 0.0, mscale_all_dim = 0.0;  // 0: not set
  double attention_factor = 0.0;              // 0: not set (derived as above)
  bool truncate = true;

  bool operator==(const RopeScaling&) const = default;
};

// The frequencies of one table: inv_freq[i] for i < head_dim / 2, and the factor cos and sin are
// multiplied by (yarn's attention factor; 1 for the other types).
struct RopeFrequencies {
  std::vector<double> inv_freq;
  double attention_scaling = 1.0;
};

// transformers' yarn_get_mscale: 0.1 * mscale * ln(scale) + 1, and 1 for scale <= 1.
double yarn_mscale(double scale, double mscale);

// `seq_len`: the number of positions of the run (only the dynamic type reads it). Throws tidal::Error on
// values no rope type accepts (factor <= 0, a non-positive original length, ...).
RopeFrequencies rope_frequencies(int64_t head_dim, double theta, const RopeScaling& s = {}, int64_t seq_len = 0);

}  // namespace tidal
