#pragma once
// The recompute modes the model tests run, as the flags would give them.
#include <string>

#include "tidal/memory/recompute.h"

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

  memory::RecomputeConfig parse(const models::ModelConfig& c) const {
    return memory::parse_recompute(granularity, method, n, act, act_n, norm, norm_n, modules, c);
  }
};

}  // namespace tidal::testing
