#include "tidal/train/same_settings.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tidal/base/error.h"

namespace tidal::train {
namespace {

// The settings every rank must share, flattened ("/model/num_hidden_layers": 4).
nlohmann::json shared_settings(const TrainArgs& args) {
  nlohmann::json j = args.to_json();
  j.erase("device");   // --device cuda:N may name each rank's own GPU
  j.erase("profile");  // only rank 0 profiles (run_training clears it on the others)
  // Paths may differ by node (mount points); what they hold is checked where it is read (a --load every
  // rank must see alike, a dataset's size, the model's config below).
  for (const char* path : {"save", "load", "data_path", "tokenizer", "pretrained", "model_source"}) j.erase(path);
  j["offload"].erase("dir");
  return j.flatten();
}

// FNV-1a, 64 bits, as 16 hex digits: the same on every build, so ranks from different nodes compare.
std::string fingerprint(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (const unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
  return hex;
}

}  // namespace

void check_same_settings(const TrainArgs& args, dist::Communicator& comm) {
  if (comm.size() <= 1) return;
  // One all-gather of 16 bytes a rank; only when they differ are the settings themselves gathered, to name what
  // differs.
  const std::string mine = shared_settings(args).dump();
  const std::vector<std::string> prints = dist::all_gather_strings(comm, fingerprint(mine));
  if (std::all_of(prints.begin(), prints.end(), [&](const std::string& p) { return p == prints[0]; })) return;
  const std::vector<std::string> all = dist::all_gather_strings(comm, mine);
  const nlohmann::json first = nlohmann::json::parse(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const nlohmann::json other = nlohmann::json::parse(all[r]);
    // Every differing setting (up to four; a flag may move a derived one too, e.g. --train-iters the
    // decay iterations): "train_iters is 9 on rank 1 and 5 on rank 0".
    std::vector<std::string> differ;
    auto shown = [](const nlohmann::json& j, const std::string& k) { return j.contains(k) ? j[k].dump() : "not set"; };
    nlohmann::json keys = first;
    keys.update(other);
    for (const auto& [k, v] : keys.items())
      if (!first.contains(k) || !other.contains(k) || first[k] != other[k])
        differ.push_back(detail::str_cat(k.substr(1), " is ", shown(other, k), " on rank ", r, " and ", shown(first, k),
                                         " on rank 0"));
    std::string list;
    for (size_t i = 0; i < differ.size() && i < 4; ++i) list += (i ? ", " : "") + differ[i];
    if (differ.size() > 4) list += detail::str_cat(" (and ", differ.size() - 4, " more)");
    detail::throw_error(detail::str_cat("tidal train: rank ", r, " was started with other settings than rank 0: ",
                                        list.empty() ? std::string("their settings differ") : list,
                                        "; start every rank with the same flags (one mpirun command line)"));
  }
}

}  // namespace tidal::train
