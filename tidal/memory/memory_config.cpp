#include "tidal/memory/memory_config.h"

#include "tidal/base/error.h"

namespace tidal::memory {

std::string name(const OffloadPolicy& p) {
  switch (p.kind) {
    case OffloadPolicyKind::all: return "all";
    case OffloadPolicyKind::layer_input: return "layer-input";
    case OffloadPolicyKind::core_attn: return "core-attn";
    case OffloadPolicyKind::min_bytes: return "min-bytes=" + std::to_string(p.min_bytes);
  }
  return "?";
}

OffloadPolicy parse_offload_policy(const std::string& text) {
  for (const OffloadPolicyKind k :
       {OffloadPolicyKind::all, OffloadPolicyKind::layer_input, OffloadPolicyKind::core_attn})
    if (text == name(OffloadPolicy{k})) return {k};
  TIDAL_CHECK(text.rfind("min-bytes=", 0) == 0, "--offload-policy: unknown policy '", text,
              "'; valid are layer-input, core-attn, all, min-bytes=N");
  const std::string n = text.substr(10);
  size_t used = 0;
  int64_t bytes = -1;
  try {
    bytes = std::stoll(n, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TIDAL_CHECK(used == n.size() && used > 0 && bytes >= 0, "--offload-policy ", text,
              ": min-bytes=N needs a byte count N >= 0");
  return {OffloadPolicyKind::min_bytes, bytes};
}

const char* name(OffloadTarget t) { return t == OffloadTarget::disk ? "disk" : "host"; }

std::string OffloadConfig::describe() const { return enabled ? name(policy) + " to " + name(target) : "none"; }

std::string LossComputeConfig::describe() const {
  return chunked ? "chunk (" + std::to_string(chunk_size) + " tokens per chunk)" : "default";
}

void MemoryConfig::set_recompute(const RecomputeConfig& rc, const models::ModelConfig& model) {
  validate_recompute(rc, model);
  recompute = rc;
  recompute_plan = rc.any() ? plan_recompute(rc, model) : std::vector<LayerRecompute>{};
}

}  // namespace tidal::memory
