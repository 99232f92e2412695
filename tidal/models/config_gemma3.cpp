#include "tidal/models/config_gemma3.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "tidal/models/config_fields.h"
#include "tidal/models/config_rope.h"
#include "tidal/models/config_window.h"

namespace tidal::models::detail {
namespace {

using json = nlohmann::json;

constexpr double kGlobalTheta = 1000000.0;  // Gemma3TextConfig.default_theta["global"]
constexpr double kLocalTheta = 10000.0;     // ... ["local"]
constexpr int64_t kDefaultPattern = 6;      // sliding_window_pattern: every 6th layer is full

// The full layers' rope dict in the form read_rope reads, and the sliding layers' base.
void read_rope_per_layer_type(const FieldReader& f, ModelConfig& c) {
  const json* params = f.find("rope_parameters");
  const bool per_type = params != nullptr && params->is_object() &&
                        (params->contains("full_attention") || params->contains("sliding_attention"));
  json full = json::object();
  for (const char* key : {"original_max_position_embeddings", "partial_rotary_factor"})
    if (const json* o = f.find(key)) full[key] = *o;
  double local = f.get("rope_local_base_freq", kLocalTheta);
  if (per_type) {  // 5.x
    TIDAL_CHECK(f.find("rope_scaling") == nullptr, "[config] ", f.source(),
                " has both 'rope_scaling' and per-layer-type 'rope_parameters': keep one");
    const json& p = *params;
    full["rope_parameters"] = p.contains("full_attention") ? p["full_attention"] : json::object();
    if (!full["rope_parameters"].is_object())
      tidal::detail::throw_error(
          tidal::detail::str_cat("[config] ", f.source(), " field 'rope_parameters.full_attention' must be an object"));
    if (!full["rope_parameters"].contains("rope_theta")) full["rope_parameters"]["rope_theta"] = kGlobalTheta;
    const FieldReader r(p, f.source(), nullptr, "rope_parameters.");
    if (const json* s = r.find("sliding_attention")) {
      TIDAL_CHECK(s->is_object(), r.where("sliding_attention"), " must be an object");
      const FieldReader sr(*s, f.source(), nullptr, "rope_parameters.sliding_attention.");
      const std::string type = sr.get(sr.alias("rope_type", "type"), "default");
      TIDAL_CHECK(type == "default", sr.where("rope_type"),
                  " must be default: Gemma 3's sliding layers rotate with their base alone");
      local = sr.get("rope_theta", local);
    }
  } else {  // 4.x: rope_theta and rope_scaling are the full layers'
    full["rope_theta"] = f.get("rope_theta", kGlobalTheta);
    if (const json* s = f.find("rope_scaling")) full["rope_scaling"] = *s;
    if (params != nullptr) full["rope_parameters"] = *params;
  }
  read_rope(FieldReader(full, f.source()), c);
  if (!(std::isfinite(local) && local > 0))
    f.refuse("rope_local_base_freq", "not a positive number", "the sliding layers' RoPE base must be positive");
  c.rope_local_theta = local;
}

// layer_types as given, else the pattern's (every sliding_window_pattern-th layer full).
void read_gemma3_layer_types(const FieldReader& f, ModelConfig& c) {
  c.sliding_window = read_window(f);
  c.layer_types.clear();
  c.sliding_window_pattern = 0;
  if (c.sliding_window == 0) return;
  c.layer_types = read_layer_types(f, c.num_hidden_layers);
  if (!c.layer_types.empty()) return;
  c.sliding_window_pattern = f.get("sliding_window_pattern", kDefaultPattern, 1, kMaxLayers);
  c.set_num_layers(c.num_hidden_layers);  // the pattern's layer types
}

}  // namespace

void read_gemma3(const FieldReader& f, ModelConfig& c) {
  read_rope_per_layer_type(f, c);
  read_gemma3_layer_types(f, c);
  c.query_pre_attn_scalar = f.get("query_pre_attn_scalar", 256.0);
  if (!(std::isfinite(c.query_pre_attn_scalar) && c.query_pre_attn_scalar > 0))
    f.refuse("query_pre_attn_scalar", "not a positive number", "the attention scale is its inverse square root");
  c.hidden_act = f.get(f.alias("hidden_activation", "hidden_act"), "gelu_pytorch_tanh");
  TIDAL_CHECK(c.hidden_act == "gelu_pytorch_tanh", f.where("hidden_activation"),
              " is not supported: Gemma 3's MLP is a GeGLU with gelu_pytorch_tanh");
  for (const char* cap : {"final_logit_softcapping", "attn_logit_softcapping"})
    if (const json* v = f.find(cap))
      f.refuse(cap, v->is_number() ? v->dump() : std::string("set"),
               "logit soft-capping is not implemented (Gemma 3 has none: only null)");
  if (f.get("use_bidirectional_attention", false))
    f.refuse("use_bidirectional_attention", "true", "tidal trains causal language models (only false)");
  c.attention_bias = f.get("attention_bias", false);
  c.qk_norm = true;
}

ModelConfig read_gemma3_multimodal(const FieldReader& f) {
  const json* text = f.find("text_config");
  TIDAL_CHECK(text != nullptr && text->is_object(), "[config] ", f.source(),
              " is a multimodal Gemma 3 config (model_type gemma3) without a 'text_config' object: tidal trains its "
              "language model, described there");
  json t = *text;
  if (!t.contains("model_type")) t["model_type"] = "gemma3_text";
  TIDAL_CHECK(t["model_type"] == "gemma3_text", f.where("text_config"),
              "'s model_type must be gemma3_text (Gemma 3's language model)");
  // The top level's tie and init apply to the whole model (transformers ties the head by the top level's).
  const bool top_tie = f.get("tie_word_embeddings", true);
  if (t.contains("tie_word_embeddings") && !t["tie_word_embeddings"].is_null() && t["tie_word_embeddings"] != top_tie)
    f.refuse("tie_word_embeddings", top_tie ? "true" : "false",
             "it differs from text_config's: keep one value (transformers ties the head by this one)");
  t["tie_word_embeddings"] = top_tie;
  if (const json* init = f.find("initializer_range")) t["initializer_range"] = *init;
  // 4.x's top-level pad_token_id: the embedding's padding row unless text_config names its own.
  if (const json* pad = f.find("pad_token_id")) {
    if (t.contains("pad_token_id") && !t["pad_token_id"].is_null() && t["pad_token_id"] != *pad)
      f.refuse("pad_token_id", pad->dump(), "it differs from text_config's: keep one value");
    t["pad_token_id"] = *pad;
  }
  ModelConfig unused;
  unused.model_type = "gemma3";
  check_unsupported_fields(f, unused);  // is_encoder_decoder, cross-attention, pruned heads, quantization
  for (const char* dtype : {"dtype", "torch_dtype"})
    if (const json* d = f.find(dtype); d != nullptr && !t.contains(dtype)) t[dtype] = *d;
  // The image fields are harmless to text-only training (models/config_fields.cpp); the text model's own
  // fields are gemma3_text's, whose fixture lists them.
  return config_from_json(t, tidal::detail::str_cat(f.source(), " text_config"));
}

void write_gemma3(const ModelConfig& c, json& j) {
  write_rope(c, j);
  j["rope_local_base_freq"] = c.rope_local_theta;
  // Gemma3TextConfig declares it an int (transformers 5 validates the type): written as one when it is.
  const double q = c.query_pre_attn_scalar;
  j["query_pre_attn_scalar"] = q == std::floor(q) && q < 1e15 ? json(int64_t(q)) : json(q);
  j["hidden_activation"] = c.hidden_act;
  j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  if (!c.layer_types.empty()) j["layer_types"] = c.layer_types;
  if (c.sliding_window_pattern > 0) j["sliding_window_pattern"] = c.sliding_window_pattern;
  j["final_logit_softcapping"] = nullptr;
  j["attn_logit_softcapping"] = nullptr;
  j["use_bidirectional_attention"] = false;
}

}  // namespace tidal::models::detail
