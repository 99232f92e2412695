// Packed instruction data with Megatron's --reset-position-ids / --reset-attention-mask: as in MindSpeed-LLM,
// the samples of a pack are told apart by the EOD token that ends each (tidal prepare --pack --append-eod), and
// a pack then trains exactly like its samples in one batch, each alone.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/integration/train_helpers.h"
#include "tidal/data/indexed_dataset.h"
#include "tidal/data/tokenizer.h"
#include "tidal/train/builtin_corpus.h"

namespace tidal::train {
namespace {

using Tokens = std::vector<int64_t>;

// PREFIX_packed_{input_ids,labels}_document with these records, int32 as tidal prepare writes them.
void write_records(const std::string& prefix, const std::vector<std::pair<Tokens, Tokens>>& records) {
  data::IndexedDatasetWriter ids(prefix + "_packed_input_ids_document", data::TokenDType::i32);
  data::IndexedDatasetWriter labels(prefix + "_packed_labels_document", data::TokenDType::i32);
  for (const auto& [t, l] : records) {
    ids.add_document(t);
    labels.add_document(l);
  }
  ids.finish();
  labels.finish();
}

TEST(InstructionPackTrain, APackWithTheResetFlagsTrainsLikeItsSamples) {
  const std::string dir = fresh_dir("instruction_pack");
  const PreparedCorpus c = prepare_builtin_corpus(512, dir);
  const int64_t eod = data::Tokenizer::load(c.tokenizer_path).eod_id();
  // Two samples: a prompt (label -100), a reply and the EOD (trained), as --append-eod writes them.
  const Tokens s1 = {40, 41, 42, 43, 44, 45, 46, eod}, l1 = {-100, -100, -100, -100, 44, 45, 46, eod};
  const Tokens s2 = {50, 51, 52, 53, 54, eod}, l2 = {-100, -100, -100, 53, 54, eod};
  Tokens packed = s1, packed_labels = l1;
  packed.insert(packed.end(), s2.begin(), s2.end());
  packed_labels.insert(packed_labels.end(), l2.begin(), l2.end());
  write_records(dir + "/apart", {{s1, l1}, {s2, l2}});
  write_records(dir + "/packed", {{packed, packed_labels}});
  const auto run = [&](const std::string& prefix, int64_t micro, std::vector<std::string> more) {
    std::vector<std::string> flags = {"--model",
                                      "tiny-llama",
                                      "--data-path",
                                      dir + "/" + prefix,
                                      "--tokenizer",
                                      c.tokenizer_path,
                                      "--is-instruction-dataset",
                                      "--split",
                                      "100,0,0",
                                      "--micro-batch-size",
                                      std::to_string(micro),
                                      "--train-iters",
                                      "1",
                                      "--eval-interval",
                                      "0",
                                      "--log-interval",
                                      "100"};
    flags.insert(flags.end(), more.begin(), more.end());
    return train(flags).losses.at(0);
  };
  // The samples alone in one batch, padded after their ends (the pads are neither attended nor trained).
  const double apart = run("apart", 2, {"--seq-length", "16"});
  const double reset = run("packed", 1, {"--seq-length", "16", "--reset-position-ids", "--reset-attention-mask"});
  EXPECT_NEAR(reset, apart, 1e-6 * apart);
  // Without the flags the second sample sees the first: another loss.
  const double plain = run("packed", 1, {"--seq-length", "16"});
  EXPECT_GT(std::abs(plain - apart), 1e-4);
  // --variable-seq-lengths pads the batch of both samples to 32 tokens, not --seq-length 96: the throughput
  // counts the 2 x 32 tokens the step ran.
  const std::string metrics = dir + "/m.json";
  run("apart", 2, {"--seq-length", "96", "--variable-seq-lengths", "--metrics-json", metrics});
  std::ifstream in(metrics);
  const nlohmann::json step = nlohmann::json::parse(in)["steps"][0];
  EXPECT_NEAR(step["tokens_per_s"].get<double>() * step["step_ms"].get<double>() / 1e3, 64.0, 1e-6);
}

}  // namespace
}  // namespace tidal::train
