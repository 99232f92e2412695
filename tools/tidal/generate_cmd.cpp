// `tidal generate --load DIR --prompt TEXT`: continue a prompt with a trained checkpoint.
#include <cstdio>

#include "tidal/base/flags.h"
#include "tidal/checkpoint/saved_model.h"
#include "tidal/data/tokenizer.h"
#include "tidal/models/generate.h"
#include "tidal/optim/finite.h"
#include "tidal/seam/runtime.h"
#include "tidal/train/arguments.h"
#include "tools/tidal/cli.h"

namespace tidal::cli {

int run_generate(const std::vector<std::string>& argv) {
  Flags f("generate");
  f.option("load", "a tidal train --save directory, or a Hugging Face model directory", "DIR")
      .option("prompt", "text to continue", "TEXT")
      .option("max-new-tokens", "tokens to generate (default 100)", "N")
      .option("temperature", "sampling temperature; 0 is greedy (default 0.8)", "T")
      .option("top-k", "sample among the k most likely tokens; 0: all (default 40)", "K")
      .option("seed", "random seed of the sampling (default 0)", "N")
      .option("tokenizer", "tokenizer.json (default: the one saved with the checkpoint)", "FILE")
      .option("lora-load",
              "a PEFT adapter directory whose LoRA adapters go onto the model (a LoRA run's checkpoint "
              "brings its own)",
              "DIR")
      .option("device", "where the model runs: cpu (default), cuda or cuda:N", "cpu|cuda|cuda:N");
  if (parse_or_help(f, argv, "--load DIR --prompt TEXT [options]")) return kOk;
  TIDAL_CHECK(f.has("load"), "tidal generate: --load DIR is required (a directory tidal train --save wrote)");
  TIDAL_CHECK(f.has("prompt"), "tidal generate: --prompt TEXT is required");
  const std::string dir = f.str("load");
  const Device device = train::run_device(f, "tidal generate", "has no values to generate from; give cpu or cuda");
  select_device(device);  // cuda:N: that GPU before the model is built on it
  checkpoint::SavedModel saved = checkpoint::load_saved_model(dir, f.str("lora-load"), device);
  const std::unique_ptr<models::CausalLM>& model = saved.model;
  const std::string &saved_tokenizer = saved.tokenizer_path, &origin = saved.origin;
  // NaN or infinite weights would sample garbage (and exit 0): a corrupt file is refused by name.
  const std::string bad = optim::first_nonfinite_weight(model->named_parameters());
  TIDAL_CHECK(bad.empty(), "tidal generate: ", origin, " holds NaN or infinite values in ", bad,
              ": the weights are corrupt; use an intact copy");
  const std::string tok_path = f.str("tokenizer", saved_tokenizer);
  TIDAL_CHECK(!tok_path.empty(), "tidal generate: ", origin, " has no tokenizer.json (trained on mock data?); ",
              "pass --tokenizer FILE");
  const data::Tokenizer tok = data::Tokenizer::load(tok_path);
  TIDAL_CHECK(tok.vocab_size() <= model->config().vocab_size, "tidal generate: the tokenizer has ", tok.vocab_size(),
              " tokens but the model only ", model->config().vocab_size, ": they do not belong together");
  models::SampleOptions so;
  so.max_new_tokens = f.integer("max-new-tokens", 100, 0, 1000000);
  so.temperature = f.number("temperature", so.temperature, 0.0, 100.0);
  so.top_k = f.integer("top-k", so.top_k, 0, int64_t(1) << 40);
  so.seed = uint64_t(f.integer("seed", 0, 0, int64_t(1) << 62));
  so.stop_token = tok.eod_id();
  const std::vector<int64_t> ids = models::generate(*model, tok.encode(f.str("prompt")), so);
  std::printf("%s\n", tok.decode(ids, /*skip_special=*/true).c_str());
  return kOk;
}

}  // namespace tidal::cli
