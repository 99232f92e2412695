// libFuzzer target: a PEFT adapter_config.json (tidal::models::lora_config_from_json, what --lora-load and a LoRA
// checkpoint read), then what tidal does next with it: the adapters put on a tiny model on the meta device
// (nn::apply_lora: its targets matched against the model's layers) and the config written back and read again.
#include <nlohmann/json.hpp>

#include "tests/fuzz/fuzz_support.h"
#include "tidal/base/json.h"
#include "tidal/models/causal_lm.h"
#include "tidal/models/peft_adapter.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tidal::fuzz::expect_clean_errors([&] {
    const nlohmann::json j = tidal::parse_json(text, "[fuzz] adapter_config.json");
    tidal::nn::LoraConfig c = tidal::models::lora_config_from_json(j, "[fuzz] adapter_config.json");
    c.r = std::min<int64_t>(c.r, 64);  // the model's size is not what is fuzzed
    tidal::nn::Init init;
    init.device = tidal::Device::meta();
    auto model = tidal::models::create_model(tidal::models::preset("tiny-qwen3"), init);
    const tidal::nn::AppliedLora applied = tidal::nn::apply_lora(*model, c, init);
    const nlohmann::json back = tidal::models::adapter_config_json(c, applied, "");
    (void)tidal::models::lora_config_from_json(back, "[fuzz] written back");
  });
  return 0;
}
