#pragma once
// Reading the fields of one config.json (models/config.cpp and its helpers): every error names the file
// and the field, and every key looked at is recorded, so a test can tell which fields of transformers'
// config classes tidal reads (tests/unit/models/hf_config_fields_test.cpp).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tidal/base/error.h"
#include "tidal/base/json.h"

namespace tidal::models::detail {

class FieldReader {
 public:
  using json = nlohmann::json;
  // `prefix` names a nested object ("rope_parameters."), recorded with its keys.
  FieldReader(const json& j, std::string_view source, std::set<std::string>* read = nullptr, std::string prefix = "")
      : j_(j), source_(source), read_(read), prefix_(std::move(prefix)) {}

  std::string_view source() const { return source_; }
  std::string where(const char* key) const {
    return tidal::detail::str_cat("[config] ", source_, " field '", prefix_, key, "'");
  }
  // nullptr when absent or null (transformers writes null for "not set").
  const json* find(const char* key) const {
    if (read_ != nullptr) read_->insert(prefix_ + key);
    return json_find(j_, key, tidal::detail::str_cat("[config] ", source_));
  }
  bool has(const char* key) const { return find(key) != nullptr; }
  // Whether the key is in the file at all, null included (where absent and null mean different things).
  bool present(const char* key) const {
    if (read_ != nullptr) read_->insert(prefix_ + key);
    return j_.contains(key);
  }

  // A required integer in [lo, hi].
  int64_t need(const char* key, int64_t lo, int64_t hi) const {
    const json* v = find(key);
    TIDAL_CHECK(v != nullptr, "[config] ", source_, " has no field '", prefix_, key, "' (an integer)");
    return in_range(key, json_int(*v, where(key)), lo, hi);
  }
  int64_t get(const char* key, int64_t fallback, int64_t lo, int64_t hi) const {
    const json* v = find(key);
    return v == nullptr ? fallback : in_range(key, json_int(*v, where(key)), lo, hi);
  }
  double get(const char* key, double fallback) const {
    const json* v = find(key);
    return v == nullptr ? fallback : json_number(*v, where(key));
  }
  bool get(const char* key, bool fallback) const {
    const json* v = find(key);
    return v == nullptr ? fallback : json_bool(*v, where(key));
  }
  std::string get(const char* key, const char* fallback) const {
    const json* v = find(key);
    return v == nullptr ? fallback : json_string(*v, where(key));
  }
  std::vector<int64_t> get_array(const char* key, size_t max_size) const {
    const json* v = find(key);
    return v == nullptr ? std::vector<int64_t>{} : json_int_array(*v, where(key), max_size);
  }
  // The first of two names a field goes by (transformers' attribute_map: qwen3_moe's num_experts is
  // num_local_experts in 5.x); both given with different values is an error naming both.
  const char* alias(const char* name, const char* other) const {
    const json *a = find(name), *b = find(other);
    TIDAL_CHECK(a == nullptr || b == nullptr || *a == *b, "[config] ", source_, " gives '", prefix_, name,
                "' = ", a->dump(), " and '", prefix_, other, "' = ", b->dump(),
                ": they are two names of one field; keep one");
    return b != nullptr && a == nullptr ? other : name;
  }
  // Refuses a field that changes the math tidal does not implement: `what` says what it would do.
  void refuse(const char* key, const std::string& shown, const std::string& what) const {
    tidal::detail::throw_error(tidal::detail::str_cat(where(key), " is ", shown, ": ", what));
  }

 private:
  int64_t in_range(const char* key, int64_t v, int64_t lo, int64_t hi) const {
    TIDAL_CHECK(v >= lo && v <= hi, where(key), " is ", v, ": it must be in [", lo, ", ", hi, "]",
                v > hi ? " (tidal's limit, far above any published model: docs/reliability.md)" : "");
    return v;
  }
  const json& j_;
  std::string_view source_;
  std::set<std::string>* read_;
  std::string prefix_;
};

}  // namespace tidal::models::detail
