#pragma once
// DeepSeek-V4's checkpoint names. transformers' DeepseekV4ForCausalLM reads and writes DeepSeek's own tensor
// names (its conversion mapping: layers.L.attn.wq_a, ffn.experts.E.w1/w2/w3, hc_attn_fn, attn_sink, head, ...),
// and keeps its module names (self_attn.q_a_proj, mlp.experts.gate_up_proj, attn_hc.fn, sinks, lm_head, ...)
// in memory; tidal's modules carry the module names. These translate a whole state dict each way: per-expert
// w1 (gate) and w3 (up) stacked into gate_up_proj (E, 2F, C), w2 into down_proj (E, C, F), and back.
// Names already in module form pass through, so either form loads.
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "tidal/nn/module.h"
#include "tidal/tensor.h"

namespace tidal::models {

// Expert parallel: the routed experts [first, first + count) a rank holds of every MoE layer (count -1: all of them).
struct ExpertRows {
  int64_t first = 0, count = -1;
  bool all() const { return count < 0; }
  bool holds(int64_t e) const { return all() || (e >= first && e < first + count); }
};

// The experts a model built under expert parallelism holds (its stacked experts' rows, nn/slab.h); all without.
ExpertRows expert_rows(const nn::Module& model);

// A checkpoint's tensors (DeepSeek's or module names, with or without the "model." prefix) -> module names.
// DeepSeek's per-expert w1/w2/w3 stack into the experts `rows` names (every expert the file has, numbered from 0
// without gaps; or exactly [first, first + count), the others skipped: gate_up_proj (count, 2F, C)). Throws naming
// an expert whose w1, w2 or w3 is missing.
std::map<std::string, Tensor> deepseek_v4_from_checkpoint(std::map<std::string, Tensor> state, ExpertRows rows = {});
// Which tensors of a checkpoint a rank holding `rows` reads: all but the per-expert weights (DeepSeek's
// "...experts.E.w1.weight") of other experts.
std::function<bool(const std::string&)> deepseek_v4_holds(ExpertRows rows);
// Module names -> the names transformers writes (save_pretrained of DeepseekV4ForCausalLM).
std::map<std::string, Tensor> deepseek_v4_to_checkpoint(const std::map<std::string, Tensor>& state);

}  // namespace tidal::models
