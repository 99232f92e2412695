#pragma once
// The LoRA flags of `tidal train` (and `tidal plan`), MindSpeed-LLM's names: --lora-target-modules
// turns LoRA on (nn/lora.h), with --lora-r, --lora-alpha, --lora-dropout, --lora-use-rslora;
// --lora-load DIR starts the adapters from a PEFT adapter directory or a LoRA run's checkpoint.
#include <string>

#include "tidal/base/flags.h"
#include "tidal/nn/lora.h"

namespace tidal::train {

struct LoraArgs {
  // Its target_modules empty: no LoRA. With --lora-load and no --lora-target-modules, the adapter's own
  // settings are taken (setup reads them).
  nn::LoraConfig config;
  std::string load;  // --lora-load DIR ("": adapters start as PEFT initializes them)
  bool enabled() const { return config.enabled() || !load.empty(); }
};

Flags& add_lora_flags(Flags& f);
// The adapters' settings: the flags', or with --lora-load and no --lora-target-modules the adapter's own
// (read from its adapter_config.json). Not enabled() without LoRA.
nn::LoraConfig resolved_lora(const LoraArgs& a);
// Reads and validates the LoRA flags of a parsed `f`; throws tidal::Error naming the flag.
LoraArgs parse_lora_args(const Flags& f);

}  // namespace tidal::train
