#include "tidal/base/json.h"

#include <limits>

#include "tidal/base/error.h"

namespace tidal {

using json = nlohmann::json;

namespace {

// The deepest nesting of arrays and objects in `text` (strings skipped), stopping once past `limit`.
int nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

json parse_json(std::string_view text, std::string_view source) {
  TIDAL_CHECK(nesting_depth(text, kMaxJsonDepth) <= kMaxJsonDepth, source, " is nested more than ", kMaxJsonDepth,
              " levels deep: refused (no file tidal reads needs more than a few)");
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    detail::throw_error(detail::str_cat(source, " is not valid JSON (syntax error near byte ", e.byte, ")"));
  } catch (const json::exception& e) {
    detail::throw_error(detail::str_cat(source, " is not valid JSON (error ", e.id, ")"));
  }
}

std::string json_kind(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a fractional number";
    case json::value_t::binary: return "binary data";
    case json::value_t::discarded: return "nothing";
  }
  return "an unknown value";
}

int64_t json_int(const json& v, std::string_view where) {
  if (v.is_number_unsigned()) {
    TIDAL_CHECK(v.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()), where,
                " is too large for a 64-bit integer");
    return int64_t(v.get<uint64_t>());
  }
  TIDAL_CHECK(v.is_number_integer(), where, " must be an integer, found ", json_kind(v));
  return v.get<int64_t>();
}

double json_number(const json& v, std::string_view where) {
  TIDAL_CHECK(v.is_number(), where, " must be a number, found ", json_kind(v));
  return v.get<double>();
}

bool json_bool(const json& v, std::string_view where) {
  TIDAL_CHECK(v.is_boolean(), where, " must be true or false, found ", json_kind(v));
  return v.get<bool>();
}

std::string json_string(const json& v, std::string_view where) {
  TIDAL_CHECK(v.is_string(), where, " must be a string, found ", json_kind(v));
  return v.get<std::string>();
}

std::vector<int64_t> json_int_array(const json& v, std::string_view where, size_t max_size) {
  TIDAL_CHECK(v.is_array(), where, " must be an array of integers, found ", json_kind(v));
  TIDAL_CHECK(v.size() <= max_size, where, " has ", v.size(), " entries, more than the ", max_size, " allowed");
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) out.push_back(json_int(v[i], detail::str_cat(where, "[", i, "]")));
  return out;
}

const json* json_find(const json& obj, std::string_view key, std::string_view where) {
  TIDAL_CHECK(obj.is_object(), where, " must be a JSON object, found ", json_kind(obj));
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace tidal
