#pragma once
// A trained model as the commands that use one read it (tidal generate, tidal export): from a
// `tidal train --save` directory (its latest checkpoint) or a Hugging Face model directory (a
// checkpoint's iter_N directory is one), with the LoRA adapters that go with it: a LoRA run's own, the
// PEFT adapter files in the same directory, or those of an adapter directory given apart.
#include <memory>
#include <string>

#include "tidal/models/causal_lm.h"

namespace tidal::checkpoint {

struct SavedModel {
  std::unique_ptr<models::CausalLM> model;  // with its adapters when it has any
  std::string tokenizer_path;               // the saved tokenizer.json, or ""
  std::string origin;                       // the directory the weights came from (for messages)
  bool lora = false;                        // adapters were applied
};

// `adapter_dir` ("": none beyond the model's own) is a PEFT adapter directory whose adapters go onto
// the model. Throws tidal::Error naming what is missing or does not fit.
SavedModel load_saved_model(const std::string& dir, const std::string& adapter_dir, Device device);

}  // namespace tidal::checkpoint
