#include "tidal/base/flags.h"

#include <algorithm>
#include <cmath>

#include "tidal/base/error.h"

namespace tidal {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

Flags& Flags::option(const std::string& name, const std::string& help, const std::string& value_name) {
  specs_.push_back({name, {help, value_name, Spec::option}});
  return *this;
}

Flags& Flags::multi(const std::string& name, const std::string& help, const std::string& value_name) {
  specs_.push_back({name, {help, value_name + "...", Spec::multi}});
  return *this;
}

Flags& Flags::flag(const std::string& name, const std::string& help) {
  specs_.push_back({name, {help, "", Spec::flag}});
  return *this;
}

void Flags::parse(const std::vector<std::string>& argv) {
  auto find = [&](const std::string& name) -> const Spec* {
    for (const auto& [n, s] : specs_)
      if (n == name) return &s;
    return nullptr;
  };
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      continue;
    }
    std::string inline_value;
    bool has_inline = false;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_inline = true;
    }
    const Spec* spec = arg.rfind("--", 0) == 0 ? find(arg.substr(2)) : nullptr;
    if (spec == nullptr) {
      std::string best, all;
      size_t best_d = 1000;
      for (const auto& [n, s] : specs_) {
        all += (all.empty() ? "--" : ", --") + n;
        const size_t d = edit_distance(arg.rfind("--", 0) == 0 ? arg.substr(2) : arg, n);
        if (d < best_d) {
          best_d = d;
          best = n;
        }
      }
      const std::string hint = best_d <= std::min<size_t>(3, best.size() / 2) ? " (did you mean --" + best + "?)" : "";
      TIDAL_CHECK(false, "tidal ", command_, ": ",
                  arg.rfind("--", 0) == 0 ? "unknown option '" : "unexpected argument '", arg, "'", hint,
                  all.empty() ? ": it takes no options" : ". Valid options: " + all);
    }
    const std::string name = arg.substr(2);
    TIDAL_CHECK(spec->kind == Spec::multi || !values_.count(name), "tidal ", command_, ": ", arg, " is given twice");
    if (!values_.count(name)) given_.push_back(name);
    std::vector<std::string>& vals = values_[name];
    const size_t before = vals.size();
    if (spec->kind == Spec::flag) {
      TIDAL_CHECK(!has_inline, "tidal ", command_, ": ", arg, " takes no value");
      continue;
    }
    if (has_inline) {
      vals.push_back(inline_value);
    } else {
      while (i + 1 < argv.size() && argv[i + 1].rfind("--", 0) != 0) {
        vals.push_back(argv[++i]);
        if (spec->kind == Spec::option) break;
      }
    }
    TIDAL_CHECK(vals.size() > before, "tidal ", command_, ": ", arg,
                spec->kind == Spec::multi ? " needs at least one value (" : " needs a value (", spec->value_name, ")");
  }
}

bool Flags::flag_on(const std::string& name) const { return values_.count(name) > 0; }

bool Flags::declares(const std::string& name) const {
  return std::any_of(specs_.begin(), specs_.end(), [&](const auto& s) { return s.first == name; });
}

std::vector<std::string> Flags::take(const std::string& name) {
  auto it = values_.find(name);
  if (it == values_.end()) return {};
  std::vector<std::string> out = std::move(it->second);
  values_.erase(it);
  given_.erase(std::find(given_.begin(), given_.end(), name));
  return out;
}

const std::vector<std::string>& Flags::values(const std::string& name) const {
  static const std::vector<std::string> none;
  auto it = values_.find(name);
  return it == values_.end() ? none : it->second;
}

std::string Flags::str(const std::string& name, const std::string& fallback) const {
  const auto& v = values(name);
  return v.empty() ? fallback : v[0];
}

std::vector<std::string> Flags::strs(const std::string& name) const { return values(name); }

int64_t Flags::integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const {
  const auto& v = values(name);
  if (v.empty()) return fallback;
  int64_t x = 0;
  size_t used = 0;
  try {
    x = std::stoll(v[0], &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TIDAL_CHECK(used == v[0].size() && used > 0, "tidal ", command_, ": --", name, " must be an integer, got '", v[0],
              "'");
  TIDAL_CHECK(x >= lo && x <= hi, "tidal ", command_, ": --", name, " must be in [", lo, ", ", hi, "], got ", x);
  return x;
}

double Flags::number(const std::string& name, double fallback, double lo, double hi) const {
  const auto& v = values(name);
  if (v.empty()) return fallback;
  double x = 0;
  size_t used = 0;
  try {
    x = std::stod(v[0], &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TIDAL_CHECK(used == v[0].size() && used > 0 && std::isfinite(x), "tidal ", command_, ": --", name,
              " must be a number, got '", v[0], "'");
  TIDAL_CHECK(x >= lo && x <= hi, "tidal ", command_, ": --", name, " must be in [", lo, ", ", hi, "], got ", x);
  return x;
}

std::string Flags::help() const {
  std::string out;
  for (const auto& [n, s] : specs_) {
    std::string left = "  --" + n + (s.value_name.empty() ? "" : " " + s.value_name);
    if (left.size() < 34)
      left.append(34 - left.size(), ' ');
    else
      left += "\n" + std::string(34, ' ');
    out += left + s.help + "\n";
  }
  return out;
}

std::string Flags::usage(const std::string& synopsis) const {
  return "usage: tidal " + command_ + " " + synopsis + "\n\n" + help();
}

}  // namespace tidal
