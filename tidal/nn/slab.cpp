#include "tidal/nn/slab.h"

#include "tidal/nn/module.h"

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

io::SelectRows slab_rows(const Module& model) {
  std::map<std::string, Slab> slabs = model.named_slabs();
  if (slabs.empty()) return {};
  return [slabs = std::move(slabs)](const std::string& name) -> std::optional<io::RowRange> {
    const Slab* slab = slab_of(slabs, name);
    if (slab == nullptr || name.ends_with(".step")) return std::nullopt;  // a moment's step count: one element
    return io::RowRange{slab->row, slab->rows};
  };
}

}  // namespace tidal::nn
