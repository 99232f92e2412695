#include "tidal/memory_stats.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

#include "tidal/base/error.h"

namespace tidal {

std::string_view category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::parameter: return "parameter";
    case MemoryCategory::gradient: return "gradient";
    case MemoryCategory::optimizer_state: return "optimizer_state";
    case MemoryCategory::activation: return "activation";
    case MemoryCategory::logits: return "logits";
    case MemoryCategory::temporary: return "temporary";
    case MemoryCategory::host_offload: return "host_offload";
  }
  return "?";
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes < 0 ? -bytes : bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[48];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%s%lld B", bytes < 0 ? "-" : "", (long long)(bytes < 0 ? -bytes : bytes));
  else
    std::snprintf(buf, sizeof buf, "%s%.2f %s", bytes < 0 ? "-" : "", v, units[u]);
  return buf;
}

int64_t parse_bytes(std::string_view text) {
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  size_t pos = 0;
  double value = 0;
  bool ok = !s.empty();
  try {
    value = std::stod(s, &pos);
  } catch (const std::exception&) {
    ok = false;
  }
  std::string unit = ok ? s.substr(pos) : "";
  for (char& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "k" || unit == "kib")
    scale = 1024.0;
  else if (unit == "m" || unit == "mib")
    scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb")
    scale = 1e3;
  else if (unit == "mb")
    scale = 1e6;
  else if (unit == "gb")
    scale = 1e9;
  else if (unit == "tb")
    scale = 1e12;
  TIDAL_CHECK(ok && scale > 0 && value >= 0 && std::isfinite(value), "[memory] cannot read '", text,
              "' as a byte count: write a number with an optional unit, e.g. 8GiB, 512MiB, 1.5GB or 4096");
  // 2^63 bytes and above do not fit a byte count (they wrapped negative before); 2^62 is 4 EiB.
  const double bytes = std::round(value * scale);
  TIDAL_CHECK(bytes < 9223372036854775808.0, "[memory] '", text,
              "' is too many bytes: a byte count is below 8 EiB (8388608 TiB)");
  return int64_t(bytes);
}

std::string format_breakdown(const MemoryStats& s) {
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "  %-16s %12s %12s %12s\n", "category", "current", "peak", "at peak");
  out += line;
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    const CategoryStats& c = s.category[size_t(i)];
    if (c.allocated == 0 && c.peak == 0) continue;
    std::snprintf(line, sizeof line, "  %-16s %12s %12s %12s\n", std::string(category_name(MemoryCategory(i))).c_str(),
                  format_bytes(c.allocated).c_str(), format_bytes(c.peak).c_str(),
                  format_bytes(s.at_peak[size_t(i)]).c_str());
    out += line;
  }
  std::snprintf(line, sizeof line, "  %-16s %12s %12s\n  %-16s %12s %12s\n  %-16s %12s  (reserved but unallocated)\n",
                "allocated", format_bytes(s.allocated).c_str(), format_bytes(s.peak_allocated).c_str(), "reserved",
                format_bytes(s.reserved).c_str(), format_bytes(s.peak_reserved).c_str(), "unallocated",
                format_bytes(s.reserved_unallocated()).c_str());
  out += line;
  return out;
}

}  // namespace tidal
