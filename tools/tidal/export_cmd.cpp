// `tidal export --load DIR --output OUT [--merge-lora]`: a trained model as a plain Hugging Face directory
// (config.json, model.safetensors, tokenizer.json) that transformers loads; with LoRA adapters folded in.
#include <cstdio>
#include <filesystem>

#include "tidal/base/flags.h"
#include "tidal/checkpoint/saved_model.h"
#include "tidal/models/pretrained.h"
#include "tidal/nn/lora.h"
#include "tools/tidal/cli.h"

namespace tidal::cli {

int run_export(const std::vector<std::string>& argv) {
  Flags f("export");
  f.option("load",
           "a tidal train --save directory (its latest checkpoint), a checkpoint's iter_N directory, or a "
           "Hugging Face model directory",
           "DIR")
      .option("lora-load",
              "a PEFT adapter directory whose adapters go onto the model (a LoRA run's checkpoint "
              "brings its own)",
              "DIR")
      .flag("merge-lora",
            "fold the LoRA adapters into the weights (W + alpha/r B A): required for a model with "
            "adapters, so no adapter is dropped by accident")
      .option("output", "the Hugging Face directory to write (created if missing)", "DIR");
  if (parse_or_help(f, argv, "--load DIR --output DIR [--merge-lora] [--lora-load ADAPTER]")) return kOk;
  TIDAL_CHECK(f.has("load"), "tidal export: --load DIR is required (a directory tidal train --save wrote)");
  TIDAL_CHECK(f.has("output"), "tidal export: --output DIR is required (where the Hugging Face directory goes)");
  const std::string out = f.str("output");
  const checkpoint::SavedModel saved = checkpoint::load_saved_model(f.str("load"), f.str("lora-load"), Device::cpu());
  TIDAL_CHECK(!saved.lora || f.flag_on("merge-lora"), "tidal export: ", saved.origin,
              " has LoRA adapters: add --merge-lora to fold them into the weights (its adapter files already are "
              "a PEFT adapter that peft loads)");
  TIDAL_CHECK(saved.lora || !f.flag_on("merge-lora"), "tidal export: --merge-lora: ", saved.origin,
              " has no LoRA adapters (give the adapter directory with --lora-load)");
  TIDAL_CHECK(std::filesystem::absolute(out) != std::filesystem::absolute(saved.origin),
              "tidal export: --output must not be the directory it reads (", saved.origin, ")");
  models::save_pretrained(saved.model->config(), nn::merged_state_dict(*saved.model), out, saved.tokenizer_path);
  std::printf("exported %s%s to %s (config.json, model.safetensors%s)\n", saved.origin.c_str(),
              saved.lora ? " with its LoRA adapters merged" : "", out.c_str(),
              saved.tokenizer_path.empty() ? "" : ", tokenizer.json");
  return kOk;
}

}  // namespace tidal::cli
