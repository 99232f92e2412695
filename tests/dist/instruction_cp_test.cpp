// Instruction data under context parallelism (parallel/context.h, Note [Masked loss share]): the two chunks
// of each sample hold different numbers of trained tokens (the prompts are masked), and the CP run's losses
// and weights are still one process's, up to fp32 rounding.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/dist/train_runs.h"
#include "tidal/data/indexed_dataset.h"
#include "tidal/data/instruction_sample.h"
#include "tidal/data/tokenizer.h"
#include "tidal/dist/single_communicator.h"

namespace tidal::train {
namespace {

namespace fs = std::filesystem;

// Records of 9 to 23 tokens whose first two thirds are a masked prompt, the rest trained.
void write_instruction_data(const std::string& dir) {
  fs::create_directories(dir);
  const data::Tokenizer tok = data::Tokenizer::train({"a tiny corpus for a tiny tokenizer"}, 300);
  tok.save(dir + "/tok.json");
  data::IndexedDatasetWriter ids(dir + "/d_packed_input_ids_document", data::TokenDType::i32);
  data::IndexedDatasetWriter labels(dir + "/d_packed_labels_document", data::TokenDType::i32);
  for (int r = 0; r < 12; ++r) {
    const int n = 9 + (r * 7) % 15;
    std::vector<int64_t> x, y;
    for (int k = 0; k < n; ++k) {
      x.push_back((r * 31 + k * 17) % 256);  // byte tokens: in every vocabulary
      y.push_back(k < 2 * n / 3 ? data::kIgnoreIndex : x.back());
    }
    ids.add_document(x);
    labels.add_document(y);
  }
  ids.finish();
  labels.finish();
}

TrainArgs instruction_args(const std::string& dir, const std::string& save, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {"--model",
                                   "tiny-llama",
                                   "--data-path",
                                   dir + "/d",
                                   "--tokenizer",
                                   dir + "/tok.json",
                                   "--is-instruction-dataset",
                                   "--split",
                                   "100,0,0",
                                   "--train-iters",
                                   "4",
                                   "--seq-length",
                                   "16",
                                   "--micro-batch-size",
                                   "2",
                                   "--global-batch-size",
                                   "2",
                                   "--eval-interval",
                                   "0",
                                   "--attention-dropout",
                                   "0",
                                   "--hidden-dropout",
                                   "0",
                                   "--adam-eps",
                                   "1",
                                   "--save",
                                   save,
                                   "--save-interval",
                                   "2"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return parse_train_args(argv);
}

TEST(ContextParallel, MaskedInstructionDataOnTwoRanks) {
  dist::Communicator& world = dist::world();
  if (world.size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  const std::string dir = scratch_dir("cp_instruction", 2);
  if (world.rank() == 0) {
    fs::remove_all(dir);
    write_instruction_data(dir);
  }
  world.barrier();
  const train::Run cp = train_on(world, world, instruction_args(dir, dir + "/ranks", {"--context-parallel-size", "2"}));
  dist::SingleCommunicator single;
  const train::Run one =
      train_on(single, world, instruction_args(dir, dir + "/one_rank" + std::to_string(world.rank()), {}));
  // The tolerances of context_parallel_train_test.cpp (a C-th of each mean instead of the share moves the
  // losses by ~1e-2 here).
  expect_same(cp, one, 1e-7, 2e-6);
}

}  // namespace
}  // namespace tidal::train
