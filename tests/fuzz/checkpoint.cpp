// libFuzzer target: the state.json of a training checkpoint (tidal::checkpoint::load_checkpoint). The process
// saves one small valid checkpoint (iteration 0) in its scratch directory; each input replaces its
// state.json, which names the checkpoint's files with their sizes and CRC-32s (the seeds hold the right
// ones, so mutants reach the safetensors and config.json readers too).
#include "tests/fuzz/checkpoint_fixture.h"
#include "tests/fuzz/fuzz_support.h"
#include "tidal/checkpoint/load.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = tidal::fuzz::save_fixture_checkpoint(tidal::fuzz::scratch_dir() + "/ckpt");
  tidal::fuzz::write_bytes(dir + "/iter_0000000/state.json", data, size);
  tidal::fuzz::expect_clean_errors([&] {
    const tidal::checkpoint::Checkpoint c = tidal::checkpoint::load_checkpoint(dir);
    (void)c.state.settings.dump();
  });
  return 0;
}
