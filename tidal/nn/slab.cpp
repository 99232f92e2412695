#include "tidal/nn/slab.h"

namespace tidal::nn {

const Slab* slab_of(const std::map<std::string, Slab>& slabs, const std::string& name) {
  if (slabs.empty()) return nullptr;
  if (auto it = slabs.find(name); it != slabs.end()) return &it->second;
  for (const char* suffix : {".exp_avg", ".exp_avg_sq", ".master", ".step"})
    if (name.ends_with(suffix))
      if (auto it = slabs.find(name.substr(0, name.size() - std::string(suffix).size())); it != slabs.end())
        return &it->second;
  return nullptr;
}

}  // namespace tidal::nn
