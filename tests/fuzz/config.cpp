// libFuzzer target: a Hugging Face config.json (tidal::models::load_config), then what tidal does next
// with it: the model's parameters built on the meta device (shapes and accounting, no bytes), and the
// config written back as JSON and read again.
#include <nlohmann/json.hpp>

#include "tests/fuzz/fuzz_support.h"
#include "tidal/models/causal_lm.h"
#include "tidal/models/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tidal::fuzz::write_scratch("config.json", data, size);
  tidal::fuzz::expect_clean_errors([&] {
    const tidal::models::ModelConfig c = tidal::models::load_config(path);
    c.validate();
    (void)tidal::models::config_from_json(tidal::models::config_to_json(c));
    tidal::nn::Init init;
    init.device = tidal::Device::meta();
    (void)tidal::models::create_model(c, init)->named_parameters();
  });
  return 0;
}
