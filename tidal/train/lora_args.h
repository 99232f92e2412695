#pragma once
// The LoRA flags of `tidal train` (and `tidal plan`), MindSpeed-LLM's names: --lora-target-modules
// turns LoRA on (nn/lora.h), with --lora-r, --lora-alpha, --lora-dropout, --lora-use-rslora;
// --lora-load DIR starts the adapters from a PEFT adapter directory or a LoRA run's checkpoint.
#include <string>

#include "tidal/base/flags.h"
#include "tidal/nn/lora.h"

namespace tidal::train {

struct LoraArgs {
  // The adapters' settings: the flags', or with --lora-load and no --lora-target-modules the adapter's own
  // (read from its adapter_config.json while parsing). Its target_modules empty: no LoRA.
  nn::LoraConfig config;
  std::string load;  // --lora-load DIR ("": adapters start as PEFT initializes them)
  bool enabled() const { return config.enabled(); }
};

Flags& add_lora_flags(Flags& f);
// Reads and validates the LoRA flags of a parsed `f` (and --lora-load's adapter_config.json when the flags
// name no targets); throws tidal::Error naming the flag or the file.
LoraArgs parse_lora_args(const Flags& f);

}  // namespace tidal::train
