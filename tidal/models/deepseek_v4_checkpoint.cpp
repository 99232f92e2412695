#include "tidal/models/deepseek_v4_checkpoint.h"

#include <utility>
#include <vector>

#include "tidal/base/error.h"
#include "tidal/ops/view.h"

namespace tidal::models {
namespace {

// (checkpoint fragment, module fragment), applied in order, as transformers' renamings are (".norm." last but
// after attn_norm / ffn_norm have become *_layernorm, so only the attention's kv norm is left to match).
const std::vector<std::pair<std::string, std::string>> kRenames = {
    {".attn.", ".self_attn."},
    {".ffn.", ".mlp."},
    {".indexer.compressor.", ".compressor.indexer."},
    {".indexer.weights_proj.", ".compressor.indexer.scorer.weights_proj."},
    {".indexer.wq_b.", ".compressor.indexer.q_b_proj."},
    {".attn_norm.", ".input_layernorm."},
    {".ffn_norm.", ".post_attention_layernorm."},
    {".hc_attn_fn", ".attn_hc.fn"},
    {".hc_attn_base", ".attn_hc.base"},
    {".hc_attn_scale", ".attn_hc.scale"},
    {".hc_ffn_fn", ".ffn_hc.fn"},
    {".hc_ffn_base", ".ffn_hc.base"},
    {".hc_ffn_scale", ".ffn_hc.scale"},
    {".attn_sink", ".sinks"},
    {".self_attn.norm.", ".self_attn.kv_norm."},
    {".compressor.norm.", ".compressor.kv_norm."},
    {".indexer.norm.", ".indexer.kv_norm."},
    {".wgate.", ".gate_proj."},
    {".ape", ".position_bias"},
    {".wq_a.", ".q_a_proj."},
    {".self_attn.wq_b.", ".self_attn.q_b_proj."},
    {".wkv.", ".kv_proj."},
    {".wo_a.", ".o_a_proj."},
    {".wo_b.", ".o_b_proj."},
    {".q_norm.", ".q_a_norm."},
    {".gate.bias", ".gate.e_score_correction_bias"},
    {".shared_experts.w1.", ".shared_experts.gate_proj."},
    {".shared_experts.w2.", ".shared_experts.down_proj."},
    {".shared_experts.w3.", ".shared_experts.up_proj."},
};
// Whole names outside the layers: DeepSeek's (no "model." prefix) -> the module's without it.
const std::vector<std::pair<std::string, std::string>> kTopLevel = {
    {"embed.weight", "embed_tokens.weight"},
    {"hc_head_fn", "hc_head.hc_fn"},
    {"hc_head_base", "hc_head.hc_base"},
    {"hc_head_scale", "hc_head.hc_scale"},
};

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// "model.layers.3.mlp.experts.5.w1.weight" -> {"model.layers.3.mlp.experts", 5, "w1"}; false for other names.
bool expert_piece(const std::string& name, std::string& prefix, int64_t& expert, std::string& which) {
  const std::string mark = ".mlp.experts.";
  const size_t at = name.find(mark);
  if (at == std::string::npos || !name.ends_with(".weight")) return false;
  const size_t start = at + mark.size(), dot = name.find('.', start);
  if (dot == std::string::npos || dot == start) return false;
  for (size_t i = start; i < dot; ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  which = name.substr(dot + 1, name.size() - dot - 1 - std::string(".weight").size());
  if (which != "w1" && which != "w2" && which != "w3") return false;
  prefix = name.substr(0, at + mark.size() - 1);
  expert = std::stoll(name.substr(start, dot - start));
  return true;
}

}  // namespace

std::map<std::string, Tensor> deepseek_v4_from_checkpoint(std::map<std::string, Tensor> state, ExpertRows rows) {
  std::map<std::string, Tensor> out;
  // Per expert block: expert -> {w1, w2, w3}.
  std::map<std::string, std::map<int64_t, std::map<std::string, Tensor>>> experts;
  for (auto& [name, t] : state) {
    std::string key = name.starts_with("model.") ? name.substr(6) : name;
    if (key == "head.weight" || key == "lm_head.weight") {
      out["lm_head.weight"] = std::move(t);
      continue;
    }
    for (const auto& [from, to] : kTopLevel)
      if (key == from) key = to;
    key = "model." + key;
    for (const auto& [from, to] : kRenames) replace_all(key, from, to);
    std::string prefix, which;
    int64_t e = 0;
    if (expert_piece(key, prefix, e, which)) {
      if (rows.holds(e)) experts[prefix][e][which] = std::move(t);  // another rank's expert: not this rank's rows
    } else
      out[key] = std::move(t);
  }
  for (auto& [prefix, by_expert] : experts) {
    std::vector<Tensor> gate_up, down;
    int64_t next = rows.all() ? 0 : rows.first;
    for (auto& [e, w] : by_expert) {
      TIDAL_CHECK(e == next, "[deepseek_v4] the checkpoint has no weights of ", prefix, ".", next,
                  " (its experts must be numbered 0, 1, ... without gaps)");
      for (const char* part : {"w1", "w2", "w3"})
        TIDAL_CHECK(w.count(part), "[deepseek_v4] the checkpoint lacks ", prefix, ".", e, ".", part, ".weight");
      gate_up.push_back(cat({w["w1"], w["w3"]}, 0).unsqueeze(0));  // (1, 2F, C)
      down.push_back(w["w2"].unsqueeze(0));                        // (1, C, F)
      ++next;
    }
    TIDAL_CHECK(rows.all() || next == rows.first + rows.count, "[deepseek_v4] the checkpoint has no weights of ",
                prefix, ".", next, " (its experts must be numbered 0, 1, ... without gaps)");
    out[prefix + ".gate_up_proj"] = cat(gate_up, 0);  // (E, 2F, C), or this rank's (count, 2F, C)
    out[prefix + ".down_proj"] = cat(down, 0);        // (E, C, F)
  }
  return out;
}

ExpertRows expert_rows(const nn::Module& model) {
  const std::map<std::string, nn::Slab> slabs = model.named_slabs();  // every layer's experts alike
  if (slabs.empty()) return {};
  return {slabs.begin()->second.row, slabs.begin()->second.rows};
}

std::function<bool(const std::string&)> deepseek_v4_holds(ExpertRows rows) {
  return [rows](const std::string& name) {
    std::string key = name;
    replace_all(key, ".ffn.experts.", ".mlp.experts.");  // DeepSeek's name of the block
    if (!key.starts_with("model.")) key = "model." + key;
    std::string prefix, which;
    int64_t e = 0;
    return !expert_piece(key, prefix, e, which) || rows.holds(e);
  };
}

std::map<std::string, Tensor> deepseek_v4_to_checkpoint(const std::map<std::string, Tensor>& state) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : state) {
    if (name == "lm_head.weight") {
      out["head.weight"] = t;
      continue;
    }
    if (name.ends_with(".experts.gate_up_proj") || name.ends_with(".experts.down_proj")) {
      const bool gate_up = name.ends_with(".gate_up_proj");
      std::string prefix = name.substr(0, name.rfind('.'));
      replace_all(prefix, ".mlp.", ".ffn.");
      const int64_t f = gate_up ? t.size(1) / 2 : 0;
      for (int64_t e = 0; e < t.size(0); ++e) {
        const std::string base = prefix + "." + std::to_string(e) + ".";
        const Tensor w = select(t, 0, e).contiguous();
        if (gate_up) {
          out[base + "w1.weight"] = w.narrow(0, 0, f).contiguous();
          out[base + "w3.weight"] = w.narrow(0, f, f).contiguous();
        } else {
          out[base + "w2.weight"] = w;
        }
      }
      continue;
    }
    std::string key = name;  // transformers keeps "model." and the module names outside the layers
    if (key.starts_with("model.layers."))
      for (auto it = kRenames.rbegin(); it != kRenames.rend(); ++it) replace_all(key, it->second, it->first);
    out[key] = t;
  }
  return out;
}

}  // namespace tidal::models
