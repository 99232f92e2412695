#pragma once
// DeepSeek-V4's checkpoint names. transformers' DeepseekV4ForCausalLM reads and writes DeepSeek's own tensor
// names (its conversion mapping: layers.L.attn.wq_a, ffn.experts.E.w1/w2/w3, hc_attn_fn, attn_sink, head, ...),
// and keeps its module names (self_attn.q_a_proj, mlp.experts.gate_up_proj, attn_hc.fn, sinks, lm_head, ...)
// in memory; tidal's modules carry the module names. These translate a whole state dict each way: per-expert
// w1 (gate) and w3 (up) stacked into gate_up_proj (E, 2F, C), w2 into down_proj (E, C, F), and back.
// Names already in module form pass through, so either form loads.
#include <map>
#include <string>

#include "tidal/tensor.h"

namespace tidal::models {

// A checkpoint's tensors (DeepSeek's or module names, with or without the "model." prefix) -> module names.
// Throws naming an expert whose w1, w2 or w3 is missing.
std::map<std::string, Tensor> deepseek_v4_from_checkpoint(std::map<std::string, Tensor> state);
// Module names -> the names transformers writes (save_pretrained of DeepseekV4ForCausalLM).
std::map<std::string, Tensor> deepseek_v4_to_checkpoint(const std::map<std::string, Tensor>& state);

}  // namespace tidal::models
