#include "tidal/train/resume.h"

#include <filesystem>
#include <string>
#include <vector>

#include "tidal/base/error.h"
#include "tidal/checkpoint/load.h"
#include "tidal/dist/every_rank.h"
#include "tidal/rng.h"

namespace tidal::train {
namespace {

// Architecture fields a checkpoint must agree on.
void check_same_model(const nlohmann::json& saved, const models::ModelConfig& now, const std::string& path) {
  const models::ModelConfig s = models::config_from_json(saved);
  TIDAL_CHECK(s.model_type == now.model_type && s.num_hidden_layers == now.num_hidden_layers &&
                  s.hidden_size == now.hidden_size && s.num_attention_heads == now.num_attention_heads &&
                  s.kv_heads() == now.kv_heads() && s.vocab_size == now.vocab_size &&
                  s.intermediate_size == now.intermediate_size && s.num_experts == now.num_experts,
              "[checkpoint] ", path, " holds a different model (", s.model_type, ", ", s.num_hidden_layers,
              " layers, hidden ", s.hidden_size, ", vocab ", s.vocab_size, ") than the one configured (",
              now.model_type, ", ", now.num_hidden_layers, " layers, hidden ", now.hidden_size, ", vocab ",
              now.vocab_size, "): use the same model flags as the run that saved it");
}

// A --bf16 checkpoint's master weights resume only a --bf16 run, and an f32 one's weights an f32 run.
void check_same_precision(const nlohmann::json& saved, const models::ModelConfig& now, const std::string& path) {
  const std::string dtype = models::config_from_json(saved).torch_dtype;
  TIDAL_CHECK(
      dtype == now.torch_dtype, "[checkpoint] ", path, "/config.json field 'torch_dtype' says ", dtype,
      ", this run trains in ", now.torch_dtype, ": ",
      dtype == "bfloat16" ? "give --bf16 as the run that saved it did" : "drop --bf16 as the run that saved it did");
}

}  // namespace

void resume(const TrainArgs& args, const models::ModelConfig& config, Setup& s, std::FILE* out) {
  const std::string& dir = args.checkpoint.load;
  const std::string what = "[checkpoint] cannot resume from --load " + dir;
  // The iteration to resume from (-1: none), which every rank must see alike.
  const std::vector<std::string> found = dist::on_every_rank(s.comm(), what, [&] {
    TIDAL_CHECK(!std::filesystem::exists(dir) || std::filesystem::is_directory(dir), "[checkpoint] --load ", dir,
                " is not a directory");
    return std::to_string(std::filesystem::exists(dir) ? checkpoint::latest_iteration(dir) : -1);
  });
  auto seen = [](const std::string& it) { return it == "-1" ? "no checkpoint" : "iteration " + it; };
  for (size_t r = 1; r < found.size(); ++r)
    TIDAL_CHECK(found[r] == found[0], what, ": rank 0 finds ", seen(found[0]), " there, rank ", r, " ", seen(found[r]),
                ": --load must be one directory every rank sees (a shared filesystem)");
  if (found[0] == "-1") {
    TIDAL_CHECK(!args.checkpoint.exit_on_missing, "[checkpoint] --load ", dir, " holds no complete checkpoint ",
                "(no latest_checkpointed_iteration.txt) and --exit-on-missing-checkpoint is set");
    std::fprintf(out, "warning: --load %s holds no complete checkpoint: starting from scratch\n", dir.c_str());
    return;
  }
  std::string path;
  dist::on_every_rank(s.comm(), what, [&] {
    // Expert parallel: this rank's experts (and their moments) out of the whole model's files; of stacked experts
    // (DeepSeek-V4) only this rank's rows.
    const checkpoint::Checkpoint ck = checkpoint::load_checkpoint(dir, s.checkpoint->holds(), s.checkpoint->rows());
    check_same_model(ck.config, config, ck.path);
    check_same_precision(ck.config, config, ck.path);
    s.checkpoint->load(ck);  // this rank's pieces, whatever layout saved them
    s.start = ck.state.iteration;
    s.loader.set_position(ck.state.data_position);
    set_rng_state(ck.state.rng);
    path = ck.path;
    return std::string();
  });
  std::fprintf(out, "resumed from %s at iteration %lld\n", path.c_str(), (long long)s.start);
}

}  // namespace tidal::train
