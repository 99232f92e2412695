#include "tidal/autograd/saved_tensor_log.h"

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "tidal/memory_scope.h"

namespace tidal::autograd {
namespace {
thread_local SavedTensorLog* t_log = nullptr;
}  // namespace

SavedTensorLog::SavedTensorLog() : outer_(t_log) { t_log = this; }
SavedTensorLog::~SavedTensorLog() { t_log = outer_; }

void SavedTensorLog::note(const Tensor& t, const char* hooks_policy) {
  if (t_log == nullptr) return;
  const MemoryCategory c = t.storage()->base_category();
  if (c != MemoryCategory::temporary && c != MemoryCategory::activation && c != MemoryCategory::logits) return;
  const MemoryContext& ctx = memory_context();
  Entry e;
  e.record.layer = ctx.layer;
  e.record.module = ctx.module != nullptr ? ctx.module : "";
  e.record.op = ctx.op != nullptr ? ctx.op : "";
  e.record.shape = t.shape();
  e.record.dtype = t.dtype();
  e.record.bytes = t.storage()->nbytes();
  e.record.policy = hooks_policy != nullptr ? hooks_policy : "kept";
  // Kept by hooks is kept: its bytes stay and can be discarded later like any other.
  e.record.category = c == MemoryCategory::logits ? "logits" : "activation";
  e.storage = t.storage();
  e.storage_id = t.storage()->id();
  e.hooked = hooks_policy != nullptr && std::string(hooks_policy) != "kept";
  t_log->entries_.push_back(std::move(e));
}

std::vector<SavedTensorRecord> SavedTensorLog::snapshot() const {
  std::vector<SavedTensorRecord> out;
  std::set<uint64_t> counted;
  for (const Entry& e : entries_) {
    SavedTensorRecord r = e.record;
    std::shared_ptr<Storage> s = e.storage.lock();
    if (!e.hooked && s && !s->is_materialized()) r.policy = "discarded";
    if (!counted.insert(e.storage_id).second) r.bytes = 0;  // an earlier record counted this storage
    out.push_back(std::move(r));
  }
  return out;
}

nlohmann::json saved_tensors_json(const std::vector<SavedTensorRecord>& records) {
  nlohmann::json j = nlohmann::json::array();
  for (const SavedTensorRecord& r : records)
    j.push_back({{"layer", r.layer},
                 {"module", r.module},
                 {"name", r.op},
                 {"shape", r.shape.vec()},
                 {"dtype", std::string(dtype_name(r.dtype))},
                 {"bytes", r.bytes},
                 {"policy", r.policy},
                 {"category", r.category}});
  return j;
}

std::string saved_tensors_table(const std::vector<SavedTensorRecord>& records) {
  std::string out;
  char line[320];
  std::snprintf(line, sizeof line, "%5s  %-40s %-22s %-22s %-5s %12s  %s\n", "layer", "module", "op", "shape", "dtype",
                "bytes", "policy");
  out += line;
  std::map<int, std::map<std::string, int64_t>> per_layer;
  std::map<std::string, int64_t> total;
  for (const SavedTensorRecord& r : records) {
    std::snprintf(line, sizeof line, "%5d  %-40s %-22s %-22s %-5s %12s  %s\n", r.layer, r.module.c_str(), r.op.c_str(),
                  r.shape.str().c_str(), std::string(dtype_name(r.dtype)).c_str(),
                  r.bytes ? format_bytes(r.bytes).c_str() : "(shared)", r.policy.c_str());
    out += line;
    const std::string key = r.category == "logits" ? r.policy + " (logits)" : r.policy;
    per_layer[r.layer][key] += r.bytes;
    total[key] += r.bytes;
  }
  out += "totals per layer (-1: outside the layers):\n";
  for (const auto& [layer, by] : per_layer) {
    std::string row = "  layer " + std::to_string(layer) + ":";
    for (const auto& [policy, bytes] : by) row += "  " + policy + " " + format_bytes(bytes);
    out += row + "\n";
  }
  std::string row = "  all:";
  for (const auto& [policy, bytes] : total) row += "  " + policy + " " + format_bytes(bytes);
  return out + row + "\n";
}

}  // namespace tidal::autograd
