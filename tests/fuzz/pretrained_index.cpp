// libFuzzer target: a sharded model directory's model.safetensors.index.json (tidal::models::load_pretrained_dir,
// `--pretrained DIR`): its weight_map's shard names resolved inside the directory (no absolute path, no '..', no
// symlink out, a regular file), then the shards read. The directory, made once, holds a tiny config.json, two small
// shards (a.safetensors, b.safetensors), a subdirectory and a symlink to a file outside it.
//
// Input: the index's text.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/fuzz/fuzz_support.h"
#include "tidal/io/safetensors.h"
#include "tidal/models/config.h"
#include "tidal/models/pretrained.h"
#include "tidal/tensor.h"

namespace {

const std::string& model_dir() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    const std::string d = tidal::fuzz::scratch_dir() + "/model";
    fs::create_directories(d + "/sub");
    std::ofstream(d + "/config.json") << tidal::models::config_to_json(tidal::models::preset("tiny-gpt2")).dump();
    tidal::io::save_safetensors(d + "/a.safetensors", {{"x", tidal::zeros({2, 3})}});
    tidal::io::save_safetensors(d + "/b.safetensors", {{"y", tidal::zeros({4})}});
    tidal::io::save_safetensors(tidal::fuzz::scratch_dir() + "/outside.safetensors", {{"z", tidal::zeros({1})}});
    std::error_code ec;
    fs::create_symlink(tidal::fuzz::scratch_dir() + "/outside.safetensors", d + "/out.safetensors", ec);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = model_dir();
  tidal::fuzz::write_bytes(dir + "/model.safetensors.index.json", data, size);
  tidal::fuzz::expect_clean_errors([&] { (void)tidal::models::load_pretrained_dir(dir); });
  return 0;
}
