#include "tidal/train/lora_args.h"

#include "tidal/base/error.h"
#include "tidal/models/peft_adapter.h"

namespace tidal::train {

Flags& add_lora_flags(Flags& f) {
  return f
      .multi("lora-target-modules",
             "fine-tune with LoRA adapters on these linear layers (the model's module names: q_proj v_proj ..., "
             "all-linear, or linear_qkv linear_proj linear_fc1 linear_fc2); every other weight is frozen",
             "NAME")
      .option("lora-r", "LoRA rank (default 16)", "R")
      .option("lora-alpha", "LoRA alpha: the adapters' output is scaled by alpha / r (default 32)", "ALPHA")
      .option("lora-dropout", "dropout on the adapters' input (default 0)", "P")
      .flag("lora-use-rslora", "scale the adapters by alpha / sqrt(r) (rank-stabilized LoRA)")
      .option("lora-load",
              "start the adapters from a PEFT adapter directory (adapter_config.json + adapter_model.safetensors) "
              "or a LoRA run's checkpoint (its iter_N directory)",
              "DIR");
}

LoraArgs parse_lora_args(const Flags& f) {
  LoraArgs a;
  nn::LoraConfig& c = a.config;
  c.target_modules = f.strs("lora-target-modules");
  a.load = f.str("lora-load");
  c.r = f.integer("lora-r", c.r, 1, int64_t(1) << 20);
  c.alpha = f.number("lora-alpha", c.alpha, 1e-12, 1e12);
  c.dropout = f.number("lora-dropout", c.dropout, 0.0, 0.99);
  c.use_rslora = f.flag_on("lora-use-rslora");
  if (!c.enabled() && a.load.empty())
    for (const char* flag : {"lora-r", "lora-alpha", "lora-dropout", "lora-use-rslora"})
      TIDAL_CHECK(!f.has(flag), "tidal train: --", flag, " needs --lora-target-modules NAME... (the layers to adapt)");
  if (!c.enabled() && !a.load.empty()) c = models::read_adapter_config(a.load);  // the adapter's own settings
  return a;
}

}  // namespace tidal::train
