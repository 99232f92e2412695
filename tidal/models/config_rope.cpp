#include "tidal/models/config_rope.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace tidal::models::detail {
namespace {

using json = nlohmann::json;
using tidal::detail::str_cat;

constexpr const char* kTypes = "default, linear, dynamic, yarn, llama3";

// A number of the rope dict that must be positive and finite; `fallback` when absent.
double positive(const FieldReader& r, const char* key, double fallback, const char* type) {
  const json* v = r.find(key);
  if (v == nullptr) return fallback;
  const double x = json_number(*v, r.where(key));
  if (!(std::isfinite(x) && x > 0))
    r.refuse(key, v->dump(), str_cat("rope type ", type, " needs a positive number here"));
  return x;
}

double required_positive(const FieldReader& r, const char* key, const char* type) {
  TIDAL_CHECK(r.has(key), "[config] ", r.source(), ": rope type ", type, " needs the field '", key,
              "' in rope_parameters (rope_scaling in transformers 4.x)");
  return positive(r, key, 1.0, type);
}

}  // namespace

void read_yarn(const FieldReader& top, const FieldReader& r, const json& dict, int64_t max_positions, RopeScaling& s) {
  const char* name = rope_type_name(RopeType::yarn);
  s.type = RopeType::yarn;
  const int64_t orig = top.has("original_max_position_embeddings")
                           ? top.get("original_max_position_embeddings", int64_t(0), 1, kMaxPositions)
                           : r.get("original_max_position_embeddings", max_positions, int64_t(1), kMaxPositions);
  s.original_max_position_embeddings = orig;
  TIDAL_CHECK(dict.contains("factor"), "[config] ", r.source(),
              ": rope type yarn needs the field 'factor' in rope_parameters (null: max_position_embeddings / "
              "original_max_position_embeddings)");
  s.factor = positive(r, "factor", double(max_positions) / double(orig), name);
  // transformers: `beta_fast or 32`, `beta_slow or 1`: 0 means the default too.
  s.beta_fast = r.get("beta_fast", 0.0) == 0 ? 32.0 : positive(r, "beta_fast", 32.0, name);
  s.beta_slow = r.get("beta_slow", 0.0) == 0 ? 1.0 : positive(r, "beta_slow", 1.0, name);
  s.attention_factor = positive(r, "attention_factor", 0.0, name);
  s.mscale = r.get("mscale", 0.0);
  s.mscale_all_dim = r.get("mscale_all_dim", 0.0);
  TIDAL_CHECK(std::isfinite(s.mscale) && std::isfinite(s.mscale_all_dim), "[config] ", r.source(),
              ": rope mscale and mscale_all_dim must be finite numbers");
  s.truncate = r.get("truncate", true);
}

void write_yarn(const RopeScaling& s, json& d) {
  d["rope_type"] = rope_type_name(RopeType::yarn);
  d["factor"] = s.factor;
  d["original_max_position_embeddings"] = s.original_max_position_embeddings;
  d["beta_fast"] = s.beta_fast;
  d["beta_slow"] = s.beta_slow;
  if (s.attention_factor > 0) d["attention_factor"] = s.attention_factor;
  if (s.mscale != 0) d["mscale"] = s.mscale;
  if (s.mscale_all_dim != 0) d["mscale_all_dim"] = s.mscale_all_dim;
  d["truncate"] = s.truncate;
}

void read_rope(const FieldReader& f, ModelConfig& c) {
  // transformers 5: `rope_scaling or rope_parameters` (an empty or null rope_scaling falls through).
  const json* scaling = f.find("rope_scaling");
  const json* params = f.find("rope_parameters");
  for (const json* d : {scaling, params})
    if (d != nullptr && !d->is_object())
      tidal::detail::throw_error(str_cat("[config] ", f.source(), " field '",
                                         d == scaling ? "rope_scaling" : "rope_parameters",
                                         "' must be an object, found ", json_kind(*d)));
  const bool use_scaling = scaling != nullptr && !scaling->empty();
  TIDAL_CHECK(!use_scaling || params == nullptr || params->empty() || *params == *scaling, "[config] ", f.source(),
              " has both 'rope_scaling' ", scaling->dump(), " and 'rope_parameters' ", params ? params->dump() : "",
              ", which differ: transformers 4.x reads only the first, 5.x prefers it; keep one");
  static const json kEmpty = json::object();
  const json& dict = use_scaling ? *scaling : params != nullptr ? *params : kEmpty;
  const FieldReader r(dict, f.source(), nullptr, use_scaling ? "rope_scaling." : "rope_parameters.");
  for (const char* layer_type : {"full_attention", "sliding_attention"})
    if (dict.contains(layer_type))
      r.refuse(layer_type, "given", "rope parameters per layer type are not supported (one set for all layers)");

  // rope_theta: the dict's (5.x), else the top-level one (4.x), else transformers' default 10000.
  const double top_theta = f.get("rope_theta", 10000.0);
  c.rope_theta = r.get("rope_theta", top_theta);
  TIDAL_CHECK(!f.has("rope_theta") || !r.has("rope_theta") || c.rope_theta == top_theta, "[config] ", f.source(),
              " gives rope_theta ", top_theta, " at the top level and ", c.rope_theta,
              " in its rope dict: transformers 4.x would use the first, 5.x the second; keep one");
  if (!(std::isfinite(c.rope_theta) && c.rope_theta > 0))
    (r.has("rope_theta") ? r : f).refuse("rope_theta", json(c.rope_theta).dump(), "it must be a positive number");

  // partial_rotary_factor (in the dict or at the top level): tidal rotates the whole head.
  for (const FieldReader* x : {&f, &r})
    if (const json* p = x->find("partial_rotary_factor");
        p != nullptr && json_number(*p, x->where("partial_rotary_factor")) != 1.0)
      x->refuse("partial_rotary_factor", p->dump(), "tidal rotates the whole head (only 1 is supported)");

  const char* type_key = r.alias("rope_type", "type");
  const std::string type = r.get(type_key, "default");
  RopeScaling& s = c.rope_scaling;
  if (!parse_rope_type(type, &s.type))
    r.refuse(type_key, "'" + type + "'", str_cat("tidal implements the rope types ", kTypes));
  const char* name = rope_type_name(s.type);
  if (s.type == RopeType::standard) return;  // transformers reads nothing else of the dict here

  if (s.type == RopeType::yarn) {
    read_yarn(f, r, dict, c.max_position_embeddings, s);
    return;
  }
  // original_max_position_embeddings: a top-level field wins (transformers' rule), then the dict's, then
  // max_position_embeddings. The dynamic type measures against max_position_embeddings.
  const int64_t orig =
      f.has("original_max_position_embeddings")
          ? f.get("original_max_position_embeddings", int64_t(0), 1, kMaxPositions)
          : r.get("original_max_position_embeddings", c.max_position_embeddings, int64_t(1), kMaxPositions);
  s.original_max_position_embeddings = s.type == RopeType::dynamic ? c.max_position_embeddings : orig;
  s.factor = required_positive(r, "factor", name);
  if (s.type == RopeType::llama3) {
    s.low_freq_factor = required_positive(r, "low_freq_factor", name);
    s.high_freq_factor = required_positive(r, "high_freq_factor", name);
    if (!(s.high_freq_factor > s.low_freq_factor))
      r.refuse("high_freq_factor", json(s.high_freq_factor).dump(),
               str_cat("rope type llama3 needs it above low_freq_factor (", s.low_freq_factor, ")"));
  }
}

void write_rope(const ModelConfig& c, json& j) {
  j["rope_theta"] = c.rope_theta;
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeType::standard) return;
  json d = {{"rope_type", rope_type_name(s.type)}, {"factor", s.factor}};
  if (s.type == RopeType::yarn) {
    write_yarn(s, d);
    j["rope_scaling"] = d;
    return;
  }
  if (s.type == RopeType::llama3) {
    d["original_max_position_embeddings"] = s.original_max_position_embeddings;
    d["low_freq_factor"] = s.low_freq_factor;
    d["high_freq_factor"] = s.high_freq_factor;
  }
  j["rope_scaling"] = d;
}

}  // namespace tidal::models::detail
