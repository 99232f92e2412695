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
  std::map<std::string, io::RowRange> ranges;  // a slab's name -> its rows
  const std::map<std::string, Slab> slabs = model.named_slabs();
  for (const auto& [name, p] : model.named_parameters())
    if (auto it = slabs.find(name); it != slabs.end()) ranges[name] = {it->second.row, p.size(0)};
  if (ranges.empty()) return {};
  return [ranges](const std::string& name) -> std::optional<io::RowRange> {
    if (name.ends_with(".step")) return std::nullopt;  // a moment's step count: one element
    for (const char* suffix : {"", ".exp_avg", ".exp_avg_sq", ".master"}) {
      const std::string s(suffix);
      if (!name.ends_with(s)) continue;
      if (auto it = ranges.find(name.substr(0, name.size() - s.size())); it != ranges.end()) return it->second;
    }
    return std::nullopt;
  };
}

}  // namespace tidal::nn
