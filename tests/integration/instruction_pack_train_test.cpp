// Packed instruction data with Megatron's --reset-position-ids / --reset-attention-mask: as in MindSpeed-LLM,
// the samples of a pack are told apart by the EOD token that ends each (tidal prepare --pack --append-eod), and
// a pack then trains exactly like its samples in one batch, each alone. A neat pack (--neat-pack) tells them apart
// by the sample indices of its attention-mask file instead, without an EOD.
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

// PREFIX_packed_{input_ids,labels,attention_mask}_document with these records, int32 as tidal prepare writes
// them; `masks` (one per record) are the attention masks, all ones when not given.
void write_records(const std::string& prefix, const std::vector<std::pair<Tokens, Tokens>>& records,
                   const std::vector<Tokens>& masks = {}) {
  data::IndexedDatasetWriter ids(prefix + "_packed_input_ids_document", data::TokenDType::i32);
  data::IndexedDatasetWriter labels(prefix + "_packed_labels_document", data::TokenDType::i32);
  data::IndexedDatasetWriter mask(prefix + "_packed_attention_mask_document", data::TokenDType::i32);
  for (size_t r = 0; r < records.size(); ++r) {
    ids.add_document(records[r].first);
    labels.add_document(records[r].second);
    mask.add_document(masks.empty() ? Tokens(records[r].first.size(), 1) : masks[r]);
  }
  ids.finish();
  labels.finish();
  mask.finish();
}

// The training losses of `iters` steps of tiny-llama on the instruction data DIR/PREFIX, `micro` samples a step.
std::vector<double> train_losses(const std::string& data, const std::string& tokenizer, int64_t micro, int iters,
                                 const std::vector<std::string>& more) {
  std::vector<std::string> flags = {"--model",
                                    "tiny-llama",
                                    "--data-path",
                                    data,
                                    "--tokenizer",
                                    tokenizer,
                                    "--is-instruction-dataset",
                                    "--split",
                                    "100,0,0",
                                    "--micro-batch-size",
                                    std::to_string(micro),
                                    "--train-iters",
                                    std::to_string(iters),
                                    "--eval-interval",
                                    "0",
                                    "--log-interval",
                                    "100"};
  flags.insert(flags.end(), more.begin(), more.end());
  return train(flags).losses;
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
  const auto run = [&](const std::string& prefix, int64_t micro, const std::vector<std::string>& more) {
    return train_losses(dir + "/" + prefix, c.tokenizer_path, micro, 1, more).at(0);
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

TEST(InstructionPackTrain, ANeatPackTrainsLikeItsSamplesWithoutAnEod) {
  const std::string dir = fresh_dir("instruction_neat_pack");
  const PreparedCorpus c = prepare_builtin_corpus(512, dir);
  // Two samples without EOD, a prompt (label -100) and a reply each; the neat pack numbers their tokens 1 and 2
  // and its padding 0, as tidal prepare --pack --neat-pack (and MindSpeed) write the attention mask.
  const Tokens s1 = {40, 41, 42, 43, 44, 45, 46}, l1 = {-100, -100, -100, -100, 44, 45, 46};
  const Tokens s2 = {50, 51, 52, 53, 54}, l2 = {-100, -100, -100, 53, 54};
  Tokens packed = s1, packed_labels = l1, samples(s1.size(), 1);
  packed.insert(packed.end(), s2.begin(), s2.end());
  packed_labels.insert(packed_labels.end(), l2.begin(), l2.end());
  samples.resize(packed.size(), 2);
  packed.resize(16, 0);
  packed_labels.resize(16, -100);
  samples.resize(16, 0);
  write_records(dir + "/apart", {{s1, l1}, {s2, l2}});
  write_records(dir + "/neat", {{packed, packed_labels}}, {samples});
  const auto run = [&](const std::string& prefix, int64_t micro, std::vector<std::string> more) {
    more.insert(more.end(), {"--seq-length", "16"});
    return train_losses(dir + "/" + prefix, c.tokenizer_path, micro, 3, more);
  };
  // Three steps on both samples: equal losses after the first step mean equal gradients too.
  const std::vector<double> apart = run("apart", 2, {});
  const std::vector<double> neat = run("neat", 1, {"--neat-pack", "--reset-attention-mask", "--reset-position-ids"});
  ASSERT_EQ(apart.size(), 3u);
  ASSERT_EQ(neat.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(neat[i], apart[i], 1e-6 * apart[i]) << "step " << i + 1;
  // The EOD rule finds no boundary in a neat pack: without --neat-pack the second sample sees the first.
  const std::vector<double> by_eod = run("neat", 1, {"--reset-attention-mask", "--reset-position-ids"});
  EXPECT_GT(std::abs(by_eod[0] - apart[0]), 1e-4);
  // MindSpeed's rules: --neat-pack needs --reset-attention-mask and instruction data.
  EXPECT_NE(message({"--model", "tiny-llama", "--data-path", dir + "/neat", "--tokenizer", c.tokenizer_path,
                     "--is-instruction-dataset", "--neat-pack"})
                .find("--neat-pack needs --reset-attention-mask"),
            std::string::npos);
  EXPECT_NE(message({"--model", "tiny-llama", "--mock-data", "--neat-pack", "--reset-attention-mask"})
                .find("--neat-pack is for instruction data"),
            std::string::npos);
}

}  // namespace
}  // namespace tidal::train
