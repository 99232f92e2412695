#include "tidal/checkpoint/saved_model.h"

#include <filesystem>

#include "tidal/checkpoint/load.h"
#include "tidal/models/peft_adapter.h"
#include "tidal/models/pretrained.h"

namespace tidal::checkpoint {

SavedModel load_saved_model(const std::string& dir, const std::string& adapter_dir, Device device) {
  SavedModel s;
  s.origin = dir;
  nn::Init init;
  init.device = device;
  if (latest_iteration(dir) >= 0) {  // a training checkpoint: a LoRA run's adapters are among its model tensors
    Checkpoint ck = load_checkpoint(dir);
    // A --mtp-num-layers run's depths are kept, so that an export holds them too.
    s.model = models::create_model(model_config_of(ck), init);
    if (ck.lora) {
      TIDAL_CHECK(adapter_dir.empty(), "[lora] ", ck.path,
                  " is a LoRA run's checkpoint with its own adapters: ", "give no other adapter directory");
      nn::apply_lora(*s.model, *ck.lora, init);
      s.lora = true;
    }
    s.model->load_state_dict(ck.model);
    s.tokenizer_path = ck.tokenizer_path;
    s.origin = ck.path;
    return s;
  }
  models::PretrainedFiles files;
  s.model = models::load_pretrained_model(dir, &files, device);
  s.tokenizer_path = files.tokenizer_path;
  const bool own = std::filesystem::exists(dir + "/" + models::kAdapterConfigFile);
  TIDAL_CHECK(adapter_dir.empty() || !own || adapter_dir == dir, "[lora] ", dir, " holds adapters of its own (",
              models::kAdapterConfigFile, "): give no other adapter directory");
  const std::string from = adapter_dir.empty() ? (own ? dir : "") : adapter_dir;
  if (from.empty()) return s;
  const models::AdapterFiles a = models::read_adapter_dir(from);
  nn::apply_lora(*s.model, a.config, init);
  models::load_adapter_weights(*s.model, a.weights, from + "/" + models::kAdapterWeightsFile);
  s.lora = true;
  return s;
}

}  // namespace tidal::checkpoint
