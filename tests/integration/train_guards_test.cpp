// `tidal train`'s guards end to end: the NaN/Inf guard (stop, skip, and no non-finite weight ever
// saved), --save checked before the first step and cleared of a killed save's leftovers, --load of a
// directory without a checkpoint, and flags whose sizes overflow 64 bits.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "tests/integration/run_command.h"
#include "tests/integration/train_helpers.h"
#include "tidal/checkpoint/load.h"
#include "tidal/data/gpt_dataset.h"
#include "tidal/io/atomic_file.h"
#include "tidal/models/pretrained.h"

namespace tidal::train {
namespace {

namespace fs = std::filesystem;
using testing::run_command;

const std::string kTidal = TIDAL_BINARY_DIR "/tidal";
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A Hugging Face directory of `preset` whose parameter `name` has NaN at the flat indices `at`.
std::string poisoned_model(const std::string& dir_name, const std::string& preset, const std::string& name,
                           const std::vector<int64_t>& at) {
  const std::string dir = fresh_dir(dir_name);
  std::unique_ptr<models::CausalLM> model = models::create_model(models::preset(preset));
  bool found = false;
  for (auto& [n, p] : model->named_parameters())
    if (n == name) {
      for (const int64_t i : at) p.data<float>()[i] = kNaN;
      found = true;
    }
  EXPECT_TRUE(found) << name;
  models::save_pretrained(*model, dir);
  return dir;
}

const std::vector<std::string> kMock = {"--mock-data", "--seq-length",   "32", "--micro-batch-size",
                                        "2",           "--log-interval", "100"};

// The command line of `tidal train` with kMock and `flags`.
std::string command(const std::string& flags) {
  std::string cmd = kTidal + " train --no-progress " + flags;
  for (const std::string& f : kMock) cmd += " " + f;
  return cmd;
}

TEST(TrainGuards, ANonFiniteLossStopsTrainingWithExit1) {
  const std::string dir = poisoned_model("nan_wte", "tiny-gpt2", "transformer.wte.weight", {5});
  const testing::CommandResult r = run_command(command("--pretrained " + dir + " --train-iters 3"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output,
                  "error: iteration 1: the loss is nan (micro-batch 1); training stopped before the "
                  "optimizer step"))
      << r.output;
  // The weights came in bad: the directory is named, not --lr (issue 33).
  EXPECT_TRUE(has(r.output,
                  "The weights hold NaN or infinite values already (first: transformer.wte.weight): the "
                  "--pretrained directory " +
                      dir + " is corrupt; no --lr fixes that"))
      << r.output;
  EXPECT_FALSE(has(r.output, "Try a lower --lr")) << r.output;
  // tidal generate refuses it instead of sampling garbage with exit 0.
  const testing::CommandResult g = run_command(kTidal + " generate --load " + dir + " --prompt x --tokenizer " +
                                               TIDAL_SOURCE_DIR "/tests/fixtures/hf/none.json");
  EXPECT_EQ(g.code, 1) << g.output;
  EXPECT_TRUE(has(g.output, "holds NaN or infinite values in transformer.wte.weight: the weights are corrupt"))
      << g.output;
}

TEST(TrainGuards, SkipModeSkipsTheBadStepsAndNeverSavesANonFiniteWeight) {
  // tiny-llama's input embedding is untied: a NaN row poisons exactly the batches holding its token.
  // Take the first token of the first batch (what the trainer's loader will draw, seed 1234).
  data::DataLoader loader(std::make_shared<data::MockDataset>(512, 32, 1234));
  const int64_t token = loader.next(2).tokens.data<int64_t>()[0];
  std::vector<int64_t> row;
  for (int64_t j = 0; j < 64; ++j) row.push_back(token * 64 + j);
  const std::string model = poisoned_model("nan_row", "tiny-llama", "model.embed_tokens.weight", row);
  const std::string metrics = fresh_dir("skip_metrics") + "/m.json";
  const TrainResult r = train(with(kMock, {"--pretrained", model, "--train-iters", "12", "--skip-nonfinite-steps",
                                           "--metrics-json", metrics, "--eval-interval", "0"}));
  ASSERT_EQ(r.losses.size(), 12u);
  EXPECT_TRUE(std::isnan(r.losses[0]));
  EXPECT_GE(r.skipped_iterations, 1);
  EXPECT_LT(r.skipped_iterations, 12);
  int64_t nan_losses = 0;
  for (const double l : r.losses) nan_losses += std::isnan(l) ? 1 : 0;
  EXPECT_EQ(nan_losses, r.skipped_iterations);
  EXPECT_EQ(nlohmann::json::parse(io::read_file(metrics))["summary"]["skipped_iterations"], r.skipped_iterations);
  // The row stays NaN (no finite update reaches it): the checkpoint is refused, naming it.
  const std::string save = fresh_dir("skip_save");
  const std::string msg = tidal::testing::error_of([&] {
    train(with(kMock, {"--pretrained", model, "--train-iters", "2", "--skip-nonfinite-steps", "--save", save}));
  });
  EXPECT_TRUE(has(msg, "[checkpoint] refusing to save iteration 2: parameter model.embed_tokens.weight holds NaN"))
      << msg;
  EXPECT_EQ(checkpoint::latest_iteration(save), -1);
}

TEST(TrainGuards, AWeightTheLossNeverSeesIsStillCheckedBeforeSaving) {
  // Position 100 is past --seq-length 32: the loss and every gradient stay finite, the weight does not.
  const std::string model = poisoned_model("nan_wpe", "tiny-gpt2", "transformer.wpe.weight", {100 * 64});
  const std::string save = fresh_dir("wpe_save");
  for (const char* check : {"--check-for-nan-in-loss-and-grad", "--no-check-for-nan-in-loss-and-grad"}) {
    const std::string msg = tidal::testing::error_of([&] {
      train(with(kMock, {"--pretrained", model, "--train-iters", "2", check, "--save", save}));
    });
    EXPECT_TRUE(has(msg, "parameter transformer.wpe.weight holds NaN or infinite values")) << check << ": " << msg;
  }
}

TEST(TrainGuards, SavePathsAreCheckedAndClearedBeforeTheFirstStep) {
  const std::string dir = fresh_dir("save_paths");
  // Not UTF-8: refused while parsing, not when the first checkpoint's JSON is written.
  EXPECT_TRUE(has(message(with(kTiny, {"--save", dir + "/bad\xff\xfe"})),
                  "--save is not valid UTF-8: tidal records its settings in JSON"));
  EXPECT_FALSE(fs::exists(dir + "/bad\xff\xfe"));
  // A killed save's partial directory goes (and is logged); the checkpoints stay.
  const std::string save = dir + "/ckpt";
  train(with(kTiny, {"--train-iters", "1", "--save", save}));
  fs::create_directories(save + "/iter_0000002.tmp-77");
  std::ofstream(save + "/iter_0000002.tmp-77/model.safetensors") << "partial";
  const testing::CommandResult r =
      run_command(command("--model tiny-gpt2 --train-iters 2 --save " + save + " --load " + save));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "removed " + save + "/iter_0000002.tmp-77, left by an interrupted save")) << r.output;
  EXPECT_TRUE(has(r.output, "resumed from " + save + "/iter_0000001 at iteration 1")) << r.output;
  EXPECT_FALSE(fs::exists(save + "/iter_0000002.tmp-77"));
  EXPECT_EQ(checkpoint::latest_iteration(save), 2);
}

// Two runs on one --save (issue 33): the second used to delete the first's save in progress and move the
// tracker back. The running one holds DIR/.tidal-save.lock (a POSIX lock, here taken by this test process as
// a stand-in): the second stops at once naming it, and the first's partial save stays.
TEST(TrainGuards, ASecondRunOnTheSameSaveDirectoryStops) {
  const std::string save = fresh_dir("save_lock");
  const int fd = ::open((save + "/.tidal-save.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  ASSERT_EQ(::fcntl(fd, F_SETLK, &l), 0);
  const std::string me = std::to_string(::getpid());
  ASSERT_EQ(::pwrite(fd, me.data(), me.size(), 0), ssize_t(me.size()));
  fs::create_directories(save + "/iter_0000003.tmp-" + me);  // the running one's save in progress
  testing::CommandResult r = run_command(command("--model tiny-gpt2 --train-iters 1 --save " + save));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "--save " + save + " is in use by another tidal train (pid " + me)) << r.output;
  EXPECT_TRUE(fs::exists(save + "/iter_0000003.tmp-" + me));
  ::close(fd);  // the first run ends: the next one takes over and clears what it left
  r = run_command(command("--model tiny-gpt2 --train-iters 1 --save " + save));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_FALSE(fs::exists(save + "/iter_0000003.tmp-" + me));
  EXPECT_EQ(checkpoint::latest_iteration(save), 1);
}

// --exit-signal-handler (Megatron-LM's; issue 33's graceful stop): a SIGTERM during a long run saves the
// step it ends and stops with exit 0; the checkpoint resumes. (Without the flag SIGTERM kills the process as
// usual: the last save is what survives.)
TEST(TrainGuards, ASigtermSavesTheStepAndStopsWithTheExitSignalHandler) {
  const std::string dir = fresh_dir("exit_signal");
  const std::string log = dir + "/log", save = dir + "/ck";
  // In the background; once iteration 2 is logged, SIGTERM; then its exit status.
  std::string script = kTidal;
  script += " train --no-progress --model tiny-gpt2 --mock-data --seq-length 32 --micro-batch-size 2 ";
  script += "--train-iters 100000 --log-interval 1 --exit-signal-handler --save " + save;
  script += " > " + log + " 2>&1 & pid=$!; for i in $(seq 600); do grep -q 'iteration        2/' " + log;
  script += " && break; sleep 0.1; done; kill -TERM $pid; wait $pid; echo exit=$?";
  const testing::CommandResult r = run_command(script);
  EXPECT_TRUE(has(r.output, "exit=0")) << r.output << io::read_file(log);
  const std::string text = io::read_file(log);
  EXPECT_TRUE(has(text, "received SIGTERM: stopped after iteration ")) << text;
  const int64_t last = checkpoint::latest_iteration(save);
  EXPECT_GE(last, 2) << text;
  EXPECT_TRUE(has(text, "saved checkpoint at iteration " + std::to_string(last))) << text;
  EXPECT_FALSE(fs::exists(save + "/.tidal-save.lock"));
}

// Two real runs on one --save (issue 33): while the first trains, the second stops at once with exit 1 naming
// the first's pid and host; the first goes on and stops cleanly on SIGTERM (exit 0, its save intact).
TEST(TrainGuards, ARealSecondRunNamesTheFirstRunsPidAndHost) {
  const std::string dir = fresh_dir("save_two_runs");
  const std::string log = dir + "/log", save = dir + "/ck";
  const std::string first = kTidal + " train --no-progress --model tiny-gpt2 --mock-data --seq-length 32 " +
                            "--micro-batch-size 2 --train-iters 100000 --log-interval 1 --exit-signal-handler --save " +
                            save;
  std::string script = first + " > " + log + " 2>&1 & pid=$!; for i in $(seq 600); do grep -q 'iteration        1/' " +
                       log + " && break; sleep 0.1; done; echo first=$pid; " +
                       command("--model tiny-gpt2 --train-iters 2 --save " + save) +
                       " 2>&1; echo second=$?; kill -TERM $pid; wait $pid; echo first_exit=$?";
  const testing::CommandResult r = run_command(script);
  const size_t at = r.output.find("first=");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string pid = r.output.substr(at + 6, r.output.find('\n', at) - at - 6);
  char host[256] = {0};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  EXPECT_TRUE(has(r.output, "--save " + save + " is in use by another tidal train (pid " + pid + " on host " + host +
                                ", as its lock file " + save + "/.tidal-save.lock says)"))
      << r.output;
  EXPECT_TRUE(has(r.output, "second=1")) << r.output;
  EXPECT_TRUE(has(r.output, "first_exit=0")) << r.output << io::read_file(log);
  EXPECT_GE(checkpoint::latest_iteration(save), 1);
  EXPECT_FALSE(fs::exists(save + "/.tidal-save.lock"));
}

// A run killed outright (SIGKILL: no handler runs) in the middle of saving every step loses at most the step it
// was in: the tracker only ever names a complete checkpoint, the next run clears any partial one and resumes.
TEST(TrainGuards, AKilledRunResumesFromItsLastCompleteSave) {
  const std::string dir = fresh_dir("killed_run");
  const std::string log = dir + "/log", save = dir + "/ck";
  const std::string script = kTidal +
                             " train --no-progress --model tiny-gpt2 --mock-data --seq-length 32 --micro-batch-size 2 "
                             "--train-iters 100000 --log-interval 1 --save-interval 1 --save " +
                             save + " > " + log +
                             " 2>&1 & pid=$!; for i in $(seq 600); do grep -q 'iteration        3/' " + log +
                             " && break; sleep 0.1; done; kill -KILL $pid; wait $pid; echo exit=$?";
  const testing::CommandResult k = run_command(script);
  EXPECT_TRUE(has(k.output, "exit=137")) << k.output;
  const int64_t last = checkpoint::latest_iteration(save);
  ASSERT_GE(last, 2) << io::read_file(log);
  const testing::CommandResult r = run_command(
      command("--model tiny-gpt2 --train-iters " + std::to_string(last + 1) + " --save " + save + " --load " + save));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "resumed from " + save + "/iter_")) << r.output;
  EXPECT_EQ(checkpoint::latest_iteration(save), last + 1);
}

// Megatron's --exit-interval N: save and stop with exit 0 after an iteration that is a multiple of N, counted
// from iteration 0, so a resumed run stops at the next multiple (3, then 6), not N iterations later.
TEST(TrainGuards, TheExitIntervalSavesAndStopsAtEachMultiple) {
  const std::string save = fresh_dir("exit_interval") + "/ck";
  for (const int64_t expected : {3, 6}) {
    const testing::CommandResult r =
        run_command(command("--model tiny-gpt2 --train-iters 10 --exit-interval 3 --save " + save + " --load " + save));
    EXPECT_EQ(r.code, 0) << r.output;
    const std::string said = "stopped after iteration " + std::to_string(expected) + " of 10 (--exit-interval 3)";
    EXPECT_TRUE(has(r.output, said)) << r.output;
    EXPECT_TRUE(has(r.output, "saved checkpoint at iteration " + std::to_string(expected))) << r.output;
    EXPECT_EQ(checkpoint::latest_iteration(save), expected);
  }
}

// Megatron's --exit-duration-in-mins M: the first iteration that ends more than M minutes after the start saves
// and stops with exit 0 (here 0.0001 minutes, 6 ms: the first iteration); without --save it says nothing was saved.
TEST(TrainGuards, TheExitDurationSavesAndStopsAfterTheIterationThatPassesIt) {
  const std::string save = fresh_dir("exit_duration") + "/ck";
  testing::CommandResult r =
      run_command(command("--model tiny-gpt2 --train-iters 100000 --exit-duration-in-mins 0.0001 --save " + save));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output,
                  "0.0001 minutes have passed: stopped after iteration 1 of 100000 "
                  "(--exit-duration-in-mins 0.0001)"))
      << r.output;
  EXPECT_EQ(checkpoint::latest_iteration(save), 1);
  r = run_command(command("--model tiny-gpt2 --train-iters 100000 --exit-duration-in-mins 0.0001"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "(--exit-duration-in-mins 0.0001); no --save, so nothing was saved")) << r.output;
  EXPECT_TRUE(has(message(with(kTiny, {"--exit-duration-in-mins", "-1"})),
                  "--exit-duration-in-mins must be in [0, 1e+09], got -1"));
}

TEST(TrainGuards, LoadOfADirectoryWithoutACheckpointStartsFreshUnlessStrict) {
  const std::string empty = fresh_dir("load_empty");
  const std::string cmd = command("--model tiny-gpt2 --train-iters 1 --load " + empty);
  testing::CommandResult r = run_command(cmd);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "warning: --load " + empty + " holds no complete checkpoint: starting from scratch"))
      << r.output;
  r = run_command(cmd + " --exit-on-missing-checkpoint");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output,
                  "holds no complete checkpoint (no latest_checkpointed_iteration.txt) and "
                  "--exit-on-missing-checkpoint is set"))
      << r.output;
  r = run_command(kTidal + " train --model tiny-gpt2 --exit-on-missing-checkpoint");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "--exit-on-missing-checkpoint needs --load DIR")) << r.output;
}

TEST(TrainGuards, FlagsWhoseSizesOverflowAreAClearErrorUpFront) {
  const std::string flags =
      " --mock-data --micro-batch-size 16777216 --seq-length 1099511627775 --max-position-embeddings 1099511627776";
  for (const char* command : {"train", "plan"}) {
    const testing::CommandResult r = run_command(kTidal + " " + command + flags + " --no-progress");
    EXPECT_EQ(r.code, 1) << command << ": " << r.output;
    EXPECT_TRUE(has(r.output,
                    "a training step of micro-batch 16777216 x 1099511627775 tokens (--micro-batch-size x "
                    "--seq-length) of a model with hidden size 256"))
        << command << ": " << r.output;
    EXPECT_TRUE(has(r.output, "give a smaller --micro-batch-size, --seq-length or model")) << r.output;
  }
  EXPECT_TRUE(has(message({"--hidden-size", "1099511627776", "--max-position-embeddings", "1099511627776"}),
                  "too large to count in 64 bits"));
  // A large but real configuration still parses.
  EXPECT_EQ(message({"--model", "qwen3-30b-a3b", "--seq-length", "32768", "--max-position-embeddings", "32768",
                     "--micro-batch-size", "64", "--attention", "eager"}),
            "no error");
}

}  // namespace
}  // namespace tidal::train
