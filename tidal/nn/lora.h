#pragma once
// LoRA fine-tuning (Hu et al. 2021) as PEFT does it: adapters on chosen linear layers (nn::Adaptable),
// every other parameter frozen (no gradient, no optimizer state, no gradient reduction). Megatron /
// MindSpeed-LLM flag names: --lora-target-modules, --lora-r, --lora-alpha, --lora-dropout (docs/finetuning.md).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tidal/nn/layers.h"

namespace tidal::nn {

struct LoraConfig {
  // The modules to adapt, by the model's own (Hugging Face) names: a module is adapted when its dotted
  // name is a target or ends with "." + target (PEFT's rule: "q_proj", "self_attn.o_proj"). Also
  // "all-linear" (PEFT's: every linear layer but the LM head and MoE routers) and MindSpeed-LLM's names
  // linear_qkv, linear_proj, linear_fc1, linear_fc2 (each the family's modules they stand for). Empty: no LoRA.
  std::vector<std::string> target_modules;
  int64_t r = 16;           // --lora-r (MindSpeed-LLM's default)
  double alpha = 32;        // --lora-alpha (MindSpeed-LLM's default)
  double dropout = 0.0;     // --lora-dropout, on each adapter's input
  bool use_rslora = false;  // --lora-use-rslora: scaling alpha / sqrt(r) (rank-stabilized LoRA), else alpha / r
  bool enabled() const { return !target_modules.empty(); }
  double scaling() const;
};

// What apply_lora adapted.
struct AppliedLora {
  std::vector<std::string> targets;  // the targets that matched, MindSpeed's names expanded (adapter_config.json's)
  std::vector<std::string> modules;  // the adapted modules' names
  bool conv1d = false;               // GPT-2's Conv1D among them (PEFT's fan_in_fan_out)
};

// Freezes every parameter of `root` (its names assigned) and adds an adapter to each targeted
// linear layer, its weights drawn with `init`'s dtype and device, each from a stream of its own (the
// generator's seed and the module's name; the generator is left as it was). Throws naming the target when one
// matches nothing (listing the module names that can take one) or a module that cannot take one.
AppliedLora apply_lora(Module& root, const LoraConfig& config, const Init& init);

// Whether a parameter's name is an adapter's ("...lora_A.weight", "...lora_B.weight").
bool is_lora_parameter(const std::string& name);

// root's state dict without the adapters, each adapted weight replaced by W + scaling B A (in its own
// layout and dtype): a plain model with the adapters folded in (tidal export --merge-lora).
std::map<std::string, Tensor> merged_state_dict(Module& root);

}  // namespace tidal::nn
