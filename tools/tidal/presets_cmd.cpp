// `tidal presets`: the built-in model presets with their sizes.
#include <cstdio>

#include "tidal/base/flags.h"
#include "tidal/memory_stats.h"
#include "tidal/models/causal_lm.h"
#include "tools/tidal/cli.h"

namespace tidal::cli {

int run_presets(const std::vector<std::string>& argv) {
  Flags flags("presets");
  if (parse_or_help(flags, argv, "   (the built-in model presets, for tidal train --model NAME)")) return kOk;
  std::printf("%-16s %-10s %8s %7s %6s %5s %7s %14s  %s\n", "preset", "type", "layers", "hidden", "heads", "kv",
              "vocab", "parameters", "description");
  for (const models::Preset& p : models::presets()) {
    nn::Init init;
    init.device = Device::meta();  // shapes only: even qwen3-30b-a3b costs nothing to count
    const int64_t params = models::create_model(p.config, init)->num_parameters();
    const models::ModelConfig& c = p.config;
    char count[32];
    std::snprintf(count, sizeof count, params >= 1000000000 ? "%.2f B" : "%.2f M",
                  double(params) / (params >= 1000000000 ? 1e9 : 1e6));
    std::printf("%-16s %-10s %8lld %7lld %6lld %5lld %7lld %14s  %s\n", p.name.c_str(), c.model_type.c_str(),
                (long long)c.num_hidden_layers, (long long)c.hidden_size, (long long)c.num_attention_heads,
                (long long)c.kv_heads(), (long long)c.vocab_size, count, p.description.c_str());
  }
  return kOk;
}

}  // namespace tidal::cli
