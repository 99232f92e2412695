#pragma once
// The recompute modes the model tests run, as the flags give them (train/memory_flags.h parses them).
#include <string>
#include <vector>

#include "tidal/memory/recompute.h"
#include "tidal/train/memory_flags.h"

namespace tidal::testing {

struct RecomputeMode {
  std::string name;
  std::string granularity, method;
  int64_t n = -1;
  bool act = false;
  int64_t act_n = -1;
  bool norm = false;
  int64_t norm_n = -1;
  std::string modules;
  bool csa = false;  // --recompute-csa-attention (DeepSeek-V4)
  bool mhc = false;  // --mhc-recompute (DeepSeek-V4)

  std::vector<std::string> flags() const {
    std::vector<std::string> f;
    auto opt = [&](const char* flag, const std::string& v) {
      if (!v.empty()) f.insert(f.end(), {flag, v});
    };
    auto num = [&](const char* flag, int64_t v) {
      if (v >= 0) f.insert(f.end(), {flag, std::to_string(v)});
    };
    opt("--recompute-granularity", granularity);
    opt("--recompute-method", method);
    num("--recompute-num-layers", n);
    if (act) f.push_back("--recompute-activation-function");
    num("--recompute-activation-function-num-layers", act_n);
    if (norm) f.push_back("--recompute-norm");
    num("--recompute-norm-num-layers", norm_n);
    opt("--recompute-modules", modules);
    if (csa) f.push_back("--recompute-csa-attention");
    if (mhc) f.push_back("--mhc-recompute");
    return f;
  }
  memory::RecomputeConfig parse(const models::ModelConfig& c) const {
    return train::parse_memory_config(flags(), c).recompute;
  }
};

}  // namespace tidal::testing
