// libFuzzer target: a safetensors file (tidal::io::load_safetensors), header and data.
#include "tidal/io/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tidal::fuzz::write_scratch("model.safetensors", data, size);
  tidal::fuzz::expect_clean_errors([&] {
    const tidal::io::Safetensors st = tidal::io::load_safetensors(path);
    for (const auto& [name, t] : st.tensors) (void)t.numel();
  });
  return 0;
}
