#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "tidal/base/error.h"
#include "tools/tidal/cli.h"

namespace tidal::cli {
namespace {
std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}
}  // namespace

Args::Args(const std::vector<std::string>& argv, const std::vector<std::string>& flags,
           const std::vector<std::string>& options, const std::string& command)
    : command_(command) {
  std::vector<std::string> all = flags;
  all.insert(all.end(), options.begin(), options.end());
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    TIDAL_CHECK(a.rfind("--", 0) == 0, "tidal ", command, ": unexpected argument '", a, "'; options are ", join(all));
    const std::string name = a.substr(2);
    if (std::find(flags.begin(), flags.end(), a) != flags.end()) {
      flags_[name] = true;
    } else if (std::find(options.begin(), options.end(), a) != options.end()) {
      TIDAL_CHECK(i + 1 < argv.size(), "tidal ", command, ": ", a, " needs a value");
      values_[name] = argv[++i];
    } else {
      TIDAL_CHECK(false, "tidal ", command, ": unknown option '", a, "'; valid options are ", join(all));
    }
  }
}

std::string Args::str(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Args::integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  int64_t v = 0;
  size_t used = 0;
  try {
    v = std::stoll(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TIDAL_CHECK(used == it->second.size() && used > 0, "tidal ", command_, ": --", name, " must be an integer, got '",
              it->second, "'");
  TIDAL_CHECK(v >= lo && v <= hi, "tidal ", command_, ": --", name, " must be in [", lo, ", ", hi, "], got ", v);
  return v;
}

double Args::number(const std::string& name, double fallback, double lo, double hi) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TIDAL_CHECK(used == it->second.size() && used > 0 && std::isfinite(v), "tidal ", command_, ": --", name,
              " must be a number, got '", it->second, "'");
  TIDAL_CHECK(v >= lo && v <= hi, "tidal ", command_, ": --", name, " must be in [", lo, ", ", hi, "], got ", v);
  return v;
}

}  // namespace tidal::cli
