// `tidal generate --load DIR --prompt TEXT`: continue a prompt with a trained checkpoint.
#include <cstdio>

#include "tidal/base/flags.h"
#include "tidal/data/tokenizer.h"
#include "tidal/models/generate.h"
#include "tidal/train/checkpoint.h"
#include "tools/tidal/cli.h"

namespace tidal::cli {

int run_generate(const std::vector<std::string>& argv) {
  Flags f("generate");
  f.option("load", "checkpoint directory (what tidal train --save wrote)", "DIR")
      .option("prompt", "text to continue", "TEXT")
      .option("max-new-tokens", "tokens to generate (default 100)", "N")
      .option("temperature", "sampling temperature; 0 is greedy (default 0.8)", "T")
      .option("top-k", "sample among the k most likely tokens; 0: all (default 40)", "K")
      .option("seed", "random seed of the sampling (default 0)", "N")
      .option("tokenizer", "tokenizer.json (default: the one saved with the checkpoint)", "FILE");
  f.parse(argv);
  TIDAL_CHECK(f.has("load"), "tidal generate: --load DIR is required (a directory tidal train --save wrote)");
  TIDAL_CHECK(f.has("prompt"), "tidal generate: --prompt TEXT is required");
  train::Checkpoint ck = train::load_checkpoint(f.str("load"));
  const std::string tok_path = f.str("tokenizer", ck.tokenizer_path);
  TIDAL_CHECK(!tok_path.empty(), "tidal generate: ", ck.path,
              " has no tokenizer.json (trained on mock data?); pass --tokenizer FILE");
  const data::Tokenizer tok = data::Tokenizer::load(tok_path);
  auto model = models::create_model(models::config_from_json(ck.config));
  model->load_state_dict(ck.model);
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
