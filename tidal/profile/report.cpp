// The words of a profile: the summary `tidal report` prints and memory_report.md.
#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "tidal/profile/analysis.h"

namespace tidal::profile {
namespace {

std::string printf_str(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string printf_str(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

std::string bytes(const nlohmann::json& j) { return format_bytes(j.is_number() ? j.get<int64_t>() : 0); }
std::string pct(int64_t part, int64_t whole) {
  return whole > 0 ? printf_str("%.1f%%", 100.0 * double(part) / double(whole)) : "-";
}

std::string layer_name(int layer) { return layer >= 0 ? "layer " + std::to_string(layer) : "outside the layers"; }

std::string where(const nlohmann::json& at) {
  std::string s = "step " + std::to_string(at.value("step", int64_t(-1))) +
                  printf_str(", %.2f ms into it", at.value("ms_into_step", 0.0));
  const std::string phase = at.value("phase", "");
  if (!phase.empty()) s += ", in " + phase;
  const std::string op = at.value("op", "");
  s += ", op " + (op.empty() ? std::string("(none)") : op);
  if (at.value("layer", -1) >= 0) s += ", layer " + std::to_string(at.value("layer", -1));
  const std::string module = at.value("module", "");
  if (!module.empty()) s += ", module " + module;
  return s;
}

// The category table of a moment (`at` is summary["peak"] or summary["out_of_memory"]).
std::string breakdown(const nlohmann::json& at, bool markdown) {
  std::string out;
  const int64_t total = at.value("allocated", int64_t(0));
  if (markdown) out += "| category | bytes | share |\n|---|---:|---:|\n";
  std::vector<std::pair<int64_t, std::string>> rows;  // largest first: the hog on top
  for (const auto& [name, v] : at["by_category"].items()) rows.push_back({v.get<int64_t>(), name});
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [b, name] : rows) {
    if (b == 0) continue;
    out += markdown ? printf_str("| %s | %s | %s |\n", name.c_str(), format_bytes(b).c_str(), pct(b, total).c_str())
                    : printf_str("    %-16s %12s  %6s\n", name.c_str(), format_bytes(b).c_str(), pct(b, total).c_str());
  }
  const std::string unallocated = bytes(at["reserved_unallocated"]), host = bytes(at["host_allocated"]);
  out += markdown ? printf_str(
                        "| **allocated** | **%s** | |\n| reserved | %s | |\n"
                        "| reserved but unallocated (reserved - allocated) | %s | |\n"
                        "| host memory (offload target) | %s | |\n",
                        format_bytes(total).c_str(), bytes(at["reserved"]).c_str(), unallocated.c_str(), host.c_str())
                  : printf_str(
                        "    %-16s %12s\n    %-16s %12s\n    %-16s %12s  (reserved but unallocated)\n"
                        "    %-16s %12s\n",
                        "allocated", format_bytes(total).c_str(), "reserved", bytes(at["reserved"]).c_str(),
                        "unallocated", unallocated.c_str(), "host memory", host.c_str());
  return out;
}

std::string info_line(const nlohmann::json& info) {
  std::string s;
  auto add = [&](const std::string& k, const nlohmann::json& v) {
    if (!s.empty()) s += ", ";
    s += k + " " + (v.is_string() ? v.get<std::string>() : v.dump());
  };
  if (info.contains("model")) add("model", info["model"]);  // first, the rest alphabetically
  for (const auto& [k, v] : info.items())
    if (k != "model" && k != "advice") add(k, v);  // the advice has its own section
  return s;
}

// The activations at the peak, by layer and the largest modules.
std::string activations_section(const nlohmann::json& act) {
  std::string out;
  if (!act.is_object() || !act.contains("by_layer")) return out;
  out += "activations at the peak: " + bytes(act["total"]) + "\n";
  for (const nlohmann::json& l : act["by_layer"])
    out += printf_str("    %-20s %12s\n", layer_name(l["layer"].get<int>()).c_str(), bytes(l["bytes"]).c_str());
  if (act.value("unattributed", int64_t(0)) != 0)
    out += printf_str("    %-20s %12s\n", "(before the window)", bytes(act["unattributed"]).c_str());
  out += "  largest modules:\n";
  int shown = 0;
  for (const nlohmann::json& m : act["by_module"]) {
    if (shown++ == 8) break;
    const std::string name = m.value("module", "");
    out += printf_str("    %-44s %12s\n", name.empty() ? "(no module)" : name.c_str(), bytes(m["bytes"]).c_str());
  }
  return out;
}

// What the saved-tensor hooks saw: how many, by policy, the ops that kept the most, and whether the kept
// activations account for the peak's.
std::string saved_tensors_section(const nlohmann::json& sv, const nlohmann::json& act) {
  std::string out;
  if (sv.value("count", 0) <= 0) return out;
  std::string policies;
  for (const auto& [k, v] : sv["by_policy"].items()) policies += (policies.empty() ? "" : ", ") + k + " " + bytes(v);
  out +=
      printf_str("saved tensors (step %lld, first micro-batch): %lld tensors; %s\n",
                 (long long)sv.value("step", int64_t(0)), (long long)sv.value("count", int64_t(0)), policies.c_str());
  std::string ops;
  int n = 0;
  for (const nlohmann::json& o : sv["kept_by_op"])
    if (n++ < 6) ops += (ops.empty() ? "" : ", ") + o.value("op", "") + " " + bytes(o["bytes"]);
  if (!ops.empty()) out += "  kept, by the op that saved them: " + ops + "\n";
  if (act.is_object() && act.contains("total")) {
    const int64_t kept = sv.value("kept_activation_bytes", int64_t(0)), at = act.value("total", int64_t(0));
    out += kept == at ? "  kept activations = activations at the peak (" + format_bytes(at) +
                            "): the table accounts for every byte\n"
                      : "  kept activations " + format_bytes(kept) + " vs " + format_bytes(at) +
                            " at the peak: the peak is not where forward ends (backward frees saved tensors and "
                            "holds recomputed or copied-back ones)\n";
  }
  return out;
}

// Self time by op on the compute lane, recompute, the side streams and the compute lane's waits.
std::string time_section(const nlohmann::json& s) {
  std::string out;
  out += "\ntime by op (self time on the compute lane):\n";
  double lane = 0;
  for (const nlohmann::json& o : s["ops"]) lane += o.value("self_ms", 0.0);
  int shown = 0;
  for (const nlohmann::json& o : s["ops"]) {
    if (shown++ == 12) break;
    out += printf_str("    %-28s %-9s %6lld calls %9.2f ms %6.1f%%\n", o.value("name", "").c_str(),
                      o.value("kind", "").c_str(), (long long)o.value("calls", int64_t(0)), o.value("self_ms", 0.0),
                      lane > 0 ? 100.0 * o.value("self_ms", 0.0) / lane : 0.0);
  }
  const nlohmann::json& rc = s["recompute"];
  if (rc.value("ranges", 0) > 0)
    out += printf_str("recompute: %lld replays, %.2f ms\n", (long long)rc.value("ranges", int64_t(0)),
                      rc.value("ms", 0.0));
  for (const nlohmann::json& st : s["streams"])
    out += printf_str("stream %s: %lld tasks, %.2f ms busy, %.0f%% of it overlapped with compute\n",
                      st.value("stream", "").c_str(), (long long)st.value("tasks", int64_t(0)),
                      st.value("busy_ms", 0.0), 100.0 * st.value("overlap_fraction", 0.0));
  if (s.value("compute_wait_ms", 0.0) > 0)
    out += printf_str("compute waited on side streams for %.2f ms\n", s.value("compute_wait_ms", 0.0));
  if (s.value("compute_comm_ms", 0.0) > 0)
    out += printf_str("compute blocked in exchanges between ranks for %.2f ms (ops of kind comm)\n",
                      s.value("compute_comm_ms", 0.0));
  return out;
}

}  // namespace

std::string format_summary(const nlohmann::json& s) {
  std::string out = "profile: " + info_line(s.value("info", nlohmann::json::object())) + "\n";
  if (!s.value("stopped", "").empty()) out += "stopped early: " + s.value("stopped", "") + "\n";
  for (const nlohmann::json& st : s["steps"]) {
    std::string phases;
    for (const auto& [name, v] : st["phases_ms"].items())
      phases += (phases.empty() ? "" : ", ") + name + printf_str(" %.1f", v.get<double>());
    out += printf_str("step %lld: %.1f ms (%s ms), peak %s\n", (long long)st.value("step", int64_t(0)),
                      st.value("ms", 0.0), phases.c_str(), bytes(st["peak_bytes"]).c_str());
  }
  const int64_t limit = s.value("limit", int64_t(0));
  if (!s["out_of_memory"].is_null()) {
    const nlohmann::json& o = s["out_of_memory"];
    out += "\nOUT OF MEMORY: a request of " + bytes(o["requested"]) + " (" + o.value("category", "") + ") failed at " +
           where(o) + (limit > 0 ? ", limit " + format_bytes(limit) : "") + "\n" + breakdown(o, false);
  }
  if (!s["peak"].is_null()) {
    const nlohmann::json& p = s["peak"];
    out += "\ndevice memory at the peak (" + where(p) + (limit > 0 ? "; limit " + format_bytes(limit) : "") + "):\n" +
           breakdown(p, false);
  }
  const nlohmann::json& act = s["activations_at_peak"];
  out += activations_section(act);
  out += saved_tensors_section(s["saved_tensors"], act);
  out += time_section(s);
  return out;
}

std::string memory_report(const ProfileData& d, const nlohmann::json& s) {
  std::string out = "# Memory report\n\n" + info_line(s.value("info", nlohmann::json::object())) + "\n\n";
  if (!d.stopped.empty()) out += "**Stopped early:** " + d.stopped + "\n\n";
  const int64_t limit = s.value("limit", int64_t(0));
  if (!s["out_of_memory"].is_null()) {
    const nlohmann::json& o = s["out_of_memory"];
    out += "## Out of memory\n\nA request of " + bytes(o["requested"]) + " (" + o.value("category", "") +
           ") failed at " + where(o) + (limit > 0 ? " (limit " + format_bytes(limit) + ")" : "") +
           ". Memory at that moment:\n\n" + breakdown(o, true) + "\n";
  }
  if (!s["peak"].is_null()) {
    const nlohmann::json& p = s["peak"];
    out += "## Breakdown at the peak\n\nThe peak happened at " + where(p) + ".\n\n" + breakdown(p, true) + "\n";
  }
  const nlohmann::json& act = s["activations_at_peak"];
  if (act.is_object() && act.contains("by_layer")) {
    out += "### Activations at the peak, per layer (by the layer that saved them)\n\n| layer | bytes |\n|---|---:|\n";
    for (const nlohmann::json& l : act["by_layer"])
      out += "| " + layer_name(l["layer"].get<int>()) + " | " + bytes(l["bytes"]) + " |\n";
    out += "| **total** | **" + bytes(act["total"]) +
           "** |\n\n### Activations at the peak, per module\n\n"
           "| module | layer | bytes |\n|---|---:|---:|\n";
    for (const nlohmann::json& m : act["by_module"]) {
      const std::string name = m.value("module", "");
      out += "| " + (name.empty() ? std::string("(no module)") : name) + " | " + std::to_string(m.value("layer", -1)) +
             " | " + bytes(m["bytes"]) + " |\n";
    }
    out += "\n";
  }
  out += "## Tensors saved for backward (step " + std::to_string(d.saved_tensors_step) + ", first micro-batch)\n\n";
  const nlohmann::json& sv = s["saved_tensors"];
  if (act.is_object() && act.contains("total"))
    out += "Kept activations in this table: " + bytes(sv["kept_activation_bytes"]) +
           "; activations at the peak: " + bytes(act["total"]) +
           ". Bytes count each storage once (a tensor saved twice shows `(shared)`).\n\n";
  out += "| layer | kept | recomputed | discarded | other |\n|---|---:|---:|---:|---:|\n";
  for (const nlohmann::json& row : sv["by_layer"]) {
    int64_t other = 0;
    for (const auto& [k, v] : row.items())
      if (k != "layer" && k != "kept" && k != "recomputed" && k != "discarded") other += v.get<int64_t>();
    out += "| " + layer_name(row["layer"].get<int>()) + " | " + bytes(row.value("kept", nlohmann::json(0))) + " | " +
           bytes(row.value("recomputed", nlohmann::json(0))) + " | " +
           bytes(row.value("discarded", nlohmann::json(0))) + " | " + format_bytes(other) + " |\n";
  }
  out += "\nKept, by the op that saved them (all layers):\n\n| op | tensors | bytes |\n|---|---:|---:|\n";
  for (const nlohmann::json& o : sv["kept_by_op"])
    out +=
        "| " + o.value("op", "") + " | " + std::to_string(o.value("tensors", 0)) + " | " + bytes(o["bytes"]) + " |\n";
  out += "\n| layer | module | op | shape | dtype | bytes | policy |\n|---:|---|---|---|---|---:|---|\n";
  for (const autograd::SavedTensorRecord& r : d.saved_tensors)
    out += "| " + std::to_string(r.layer) + " | " + r.module + " | " + r.op + " | " + r.shape.str() + " | " +
           std::string(dtype_name(r.dtype)) + " | " + (r.bytes ? format_bytes(r.bytes) : "(shared)") + " | " +
           r.policy + (r.category == "logits" ? " (logits)" : "") + " |\n";
  const nlohmann::json info = s.value("info", nlohmann::json::object());
  if (info.contains("advice"))
    out +=
        "\n## What to try next\n\nThe triage order for this model and batch, each with the saving tidal's estimator "
        "predicts for the step's peak:\n\n```\n" +
        info["advice"].get<std::string>() + "```\n";
  out += "\n## Summary (what `tidal report` prints)\n\n```\n" + format_summary(s) + "```\n";
  return out;
}

}  // namespace tidal::profile
