// `tidal train --data-path W1 A W2 B` (Megatron's weighted blend, data/blended_dataset.h) and `--data-path A B`
// (weights by size): the samples each dataset gave, as the log and --metrics-json report them.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/integration/train_helpers.h"
#include "tidal/data/indexed_dataset.h"
#include "tidal/train/builtin_corpus.h"

namespace tidal::train {
namespace {

struct TwoDatasets {
  std::string a, b, tokenizer;
};

// The built-in corpus (A, and its tokenizer) and a dataset of 40 short documents of repeated ids (B).
TwoDatasets two_datasets(const std::string& dir) {
  const PreparedCorpus c = prepare_builtin_corpus(512, dir);
  data::IndexedDatasetWriter w(dir + "/b", data::TokenDType::u16);
  for (int d = 0; d < 40; ++d) w.add_document(std::vector<int64_t>(size_t(20 + d), 5 + d));
  w.finish();
  return {c.data_prefix, dir + "/b", c.tokenizer_path};
}

nlohmann::json draws_of(const std::string& metrics) {
  std::ifstream in(metrics);
  return nlohmann::json::parse(in)["summary"]["blend_draws"];
}

TEST(DataBlendTrain, WeightsGiveMegatronsDraws) {
  const std::string dir = fresh_dir("blend");
  const TwoDatasets d = two_datasets(dir);
  const std::string metrics = dir + "/m.json";
  const TrainResult r = train({"--model",   "tiny-gpt2",      "--data-path", "0.25",
                               d.a,         "0.75",           d.b,           "--tokenizer",
                               d.tokenizer, "--seq-length",   "16",          "--micro-batch-size",
                               "2",         "--train-iters",  "4",           "--eval-interval",
                               "0",         "--log-interval", "100",         "--metrics-json",
                               metrics});
  EXPECT_EQ(r.iterations, 4);
  // 8 samples: B A B B A B B B (the tie at sample 4 goes to the first dataset).
  const nlohmann::json draws = draws_of(metrics);
  EXPECT_EQ(draws[d.a].get<int64_t>(), 2);
  EXPECT_EQ(draws[d.b].get<int64_t>(), 6);
}

TEST(DataBlendTrain, PrefixesAloneAreWeightedBySize) {
  const std::string dir = fresh_dir("blend_size");
  const TwoDatasets d = two_datasets(dir);
  const std::string metrics = dir + "/m.json";
  train({"--model", "tiny-gpt2", "--data-path", d.a, d.b, "--tokenizer", d.tokenizer, "--seq-length", "16",
         "--micro-batch-size", "4", "--train-iters", "25", "--eval-interval", "0", "--log-interval", "100",
         "--metrics-json", metrics});
  const nlohmann::json draws = draws_of(metrics);
  const int64_t a = draws[d.a].get<int64_t>(), b = draws[d.b].get<int64_t>();
  EXPECT_EQ(a + b, 100);
  // B holds 40 documents of 20..59 tokens (1580, 98% of them in training: ~96 samples of 16), the built-in corpus
  // far more: most samples come from it.
  EXPECT_GT(a, 80);
  EXPECT_GT(b, 0);
}

}  // namespace
}  // namespace tidal::train
