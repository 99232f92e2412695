#pragma once
// The config.json fields beyond the sizes: those no value of which changes what tidal computes (harmless,
// each with its reason), and the checks that refuse, by name and value, the fields that would change
// the math in a way tidal does not implement (a sliding window, GPT-2's unscaled attention, ...).
// tests/unit/models/hf_config_fields_test.cpp walks every field of transformers' config classes
// (tests/fixtures/hf/config_fields/) and fails on one tidal neither reads nor lists here.
#include <string>
#include <vector>

#include "tidal/models/config.h"
#include "tidal/models/config_reader.h"

namespace tidal::models {

struct HarmlessField {
  const char* name;
  const char* reason;
};
// The harmless fields of `model_type` (gpt2, llama, qwen3, qwen3_moe), the common ones included.
std::vector<HarmlessField> harmless_config_fields(const std::string& model_type);

namespace detail {
// Refuses what tidal does not implement; `c` holds the fields read so far (sizes, dropout, ties).
void check_unsupported_fields(const FieldReader& f, const ModelConfig& c);
}  // namespace detail

}  // namespace tidal::models
