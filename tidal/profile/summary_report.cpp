#include "tidal/profile/summary_report.h"

#include <cmath>

#include "tidal/base/error.h"
#include "tidal/base/json.h"
#include "tidal/profile/analysis.h"

namespace tidal::profile {
namespace {

using json = nlohmann::json;

// `obj` is an object holding each of `keys` (null allowed): format_summary reads these without a
// default, and the JSON library reads past the end of an object for a key it lacks.
void require(const json& obj, std::initializer_list<const char*> keys, const std::string& where) {
  TIDAL_CHECK(obj.is_object(), where, " must be an object, found ", json_kind(obj));
  for (const char* key : keys) TIDAL_CHECK(obj.contains(key), where, " has no field '", key, "'");
}

// `v` is an array of objects, each holding `keys`.
void require_each(const json& v, std::initializer_list<const char*> keys, const std::string& where) {
  TIDAL_CHECK(v.is_array(), where, " must be an array, found ", json_kind(v));
  for (size_t i = 0; i < v.size(); ++i) require(v[i], keys, ::tidal::detail::str_cat(where, "[", i, "]"));
}

// The fields of a summary.json that format_summary indexes, checked before it runs.
void check_summary(const json& s, const std::string& path) {
  const std::string field = "tidal report: " + path + " field";
  TIDAL_CHECK(s.is_object(), "tidal report: ", path, " must hold a JSON object, found ", json_kind(s));
  const json* version = json_find(s, "version", "tidal report: " + path);
  TIDAL_CHECK(version != nullptr && json_int(*version, field + " 'version'") == 1, "tidal report: ", path,
              " is not a tidal profile summary (no version 1)");
  require(s, {"steps", "out_of_memory", "peak", "activations_at_peak", "saved_tensors", "ops", "recompute", "streams"},
          "tidal report: " + path);
  require_each(s["steps"], {"phases_ms", "peak_bytes"}, field + " 'steps'");
  require_each(s["ops"], {}, field + " 'ops'");
  require_each(s["streams"], {}, field + " 'streams'");
  if (!s["out_of_memory"].is_null())
    require(s["out_of_memory"], {"by_category", "reserved_unallocated", "host_allocated", "reserved", "requested"},
            field + " 'out_of_memory'");
  if (!s["peak"].is_null())
    require(s["peak"], {"by_category", "reserved_unallocated", "host_allocated", "reserved"}, field + " 'peak'");
  const json& act = s["activations_at_peak"];
  if (act.is_object() && act.contains("by_layer")) {
    require(act, {"total", "by_module"}, field + " 'activations_at_peak'");
    require_each(act["by_layer"], {"layer", "bytes"}, field + " 'activations_at_peak.by_layer'");
    require_each(act["by_module"], {"bytes"}, field + " 'activations_at_peak.by_module'");
  }
  const json& saved = s["saved_tensors"];
  if (saved.is_object() && saved.contains("count")) {
    require(saved, {"by_policy", "kept_by_op"}, field + " 'saved_tensors'");
    require_each(saved["kept_by_op"], {"bytes"}, field + " 'saved_tensors.kept_by_op'");
  }
}

// Every number of `v` a float of at most 2^62 in magnitude: format_summary reads counts as integers, and a float
// beyond int64's range would convert undefined (a summary tidal wrote holds none: its counts are integers, its
// times small). `where`: the field's path, for the message.
void check_numbers(const json& v, const std::string& path, const std::string& where) {
  if (v.is_number_float()) {
    const double x = v.get<double>();
    TIDAL_CHECK(std::isfinite(x) && std::abs(x) <= 4.6e18, "tidal report: ", path, " field '", where, "' holds ", x,
                ": not a tidal profile summary (its numbers are counts, bytes and times within 2^62)");
  } else if (v.is_object()) {
    for (const auto& [key, value] : v.items()) check_numbers(value, path, where.empty() ? key : where + "." + key);
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) check_numbers(v[i], path, ::tidal::detail::str_cat(where, "[", i, "]"));
  }
}

}  // namespace

std::string report_of_summary(const json& summary, const std::string& path) {
  check_summary(summary, path);
  check_numbers(summary, path, "");
  try {
    return format_summary(summary);
  } catch (const json::exception& e) {  // a field of the wrong kind: name the file, not the library's words
    ::tidal::detail::throw_error(
        ::tidal::detail::str_cat("tidal report: ", path,
                                 " is not a tidal profile summary (a field holds the wrong kind of value, "
                                 "JSON error ",
                                 e.id, ")"));
  }
}

}  // namespace tidal::profile
