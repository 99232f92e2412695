// `tidal train` through its API: flags, resuming bit for bit, metrics, and learning real text.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/integration/train_helpers.h"
#include "tidal/base/error.h"
#include "tidal/data/indexed_dataset.h"
#include "tidal/data/tokenizer.h"
#include "tidal/io/atomic_file.h"

namespace tidal::train {
namespace {

namespace fs = std::filesystem;

}  // namespace

TEST(Train, ResumingGivesBitwiseIdenticalLosses) {
  // Dropout, gradient accumulation and a cosine schedule: every piece of state must come back.
  const std::string dir = fresh_dir("resume");
  TrainResult full = train(with(kTiny, {"--train-iters", "8"}));
  ASSERT_EQ(full.losses.size(), 8u);
  train(with(kTiny, {"--train-iters", "8", "--save", dir, "--save-interval", "4", "--lr-decay-iters", "8"}));
  // Resume from the iteration-4 checkpoint: drop the later one.
  std::ofstream(dir + "/latest_checkpointed_iteration.txt") << "4\n";
  TrainResult resumed = train(with(kTiny, {"--train-iters", "8", "--load", dir, "--lr-decay-iters", "8"}));
  ASSERT_EQ(resumed.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(resumed.losses[i], full.losses[4 + i]) << "iteration " << 5 + i;
  EXPECT_EQ(resumed.iterations, 8);
}

TEST(Train, ACheckpointOfAnotherModelIsRejected) {
  const std::string dir = fresh_dir("mismatch");
  train(with(kTiny, {"--train-iters", "2", "--save", dir}));
  try {
    train(with(kTiny, {"--train-iters", "4", "--load", dir, "--num-layers", "3"}));
    FAIL() << "expected an error";
  } catch (const tidal::Error& e) {
    EXPECT_NE(std::string(e.what()).find("different model"), std::string::npos) << e.what();
  }
}

TEST(Train, MetricsJsonHasTheDocumentedFields) {
  const std::string dir = fresh_dir("metrics");
  const std::string path = dir + "/metrics.json";
  train(with(kTiny, {"--train-iters", "3", "--metrics-json", path, "--eval-interval", "3", "--eval-iters", "1"}));
  const nlohmann::json j = nlohmann::json::parse(io::read_file(path));
  EXPECT_EQ(j["config"]["train_iters"], 3);
  ASSERT_EQ(j["steps"].size(), 3u);
  for (const char* k : {"iteration", "loss", "lr", "grad_norm", "step_ms", "tokens_per_s", "device_peak_bytes"})
    EXPECT_TRUE(j["steps"][0].contains(k)) << k;
  const nlohmann::json& s = j["summary"];
  for (const char* k : {"median_step_ms", "tokens_per_s", "final_loss", "final_val_loss", "device_peak_bytes",
                        "device_peak_reserved_bytes", "host_peak_bytes", "host_reserved_bytes",
                        "host_pool_reserved_bytes", "peak_breakdown_bytes", "peak_bytes_by_category", "peak_rss_bytes"})
    EXPECT_TRUE(s.contains(k)) << k;
  for (const char* c :
       {"parameter", "gradient", "optimizer_state", "activation", "logits", "temporary", "host_offload"}) {
    EXPECT_TRUE(s["peak_breakdown_bytes"].contains(c)) << c;
    EXPECT_TRUE(s["peak_bytes_by_category"].contains(c)) << c;
  }
  EXPECT_GT(s["peak_bytes_by_category"]["optimizer_state"].get<int64_t>(), 0);
  EXPECT_GT(s["device_peak_bytes"].get<int64_t>(), s["peak_breakdown_bytes"]["parameter"].get<int64_t>());
  EXPECT_EQ(s["host_pool_reserved_bytes"], 0);  // the CPU's host memory is not pooled (allocator.h)
  // The process as the system counts it: on the CPU backend the device's peak is inside it.
  EXPECT_GE(s["peak_rss_bytes"].get<int64_t>(), s["device_peak_bytes"].get<int64_t>());
  EXPECT_EQ(s["peak_rss_bytes"].get<int64_t>() % 1024, 0);
}

TEST(Train, FlagErrorsNameTheProblem) {
  EXPECT_NE(message({"--num-layer", "2"}).find("did you mean --num-layers"), std::string::npos);
  EXPECT_NE(message({"--model", "tiny-gpt2", "--config", "x.json"}).find("conflict"), std::string::npos);
  EXPECT_NE(message({"--mock-data", "--data-path", "p"}).find("conflict"), std::string::npos);
  EXPECT_NE(message({"--micro-batch-size", "3", "--global-batch-size", "8"}).find("multiple"), std::string::npos);
  EXPECT_NE(message({"--model", "tiny-gpt2", "--seq-length", "4096"}).find("max position"), std::string::npos);
  EXPECT_NE(message({"--data-path", "p"}).find("--tokenizer"), std::string::npos);
  EXPECT_NE(message({"--model", "gpt5"}).find("valid presets"), std::string::npos);
  EXPECT_NE(message({"--lr", "fast"}).find("--lr must be a number"), std::string::npos);
  EXPECT_NE(message({"--attention", "sparse"}).find("flash or eager"), std::string::npos);
  EXPECT_NE(message({"--adam-eps", "0"}).find("--adam-eps must be > 0"), std::string::npos);
  EXPECT_NE(message({"--num-attention-heads", "5", "--model", "tiny-llama"}).find("no error"), std::string::npos);
}

// The done-when test of the training issue: a tiny Llama learns tinyshakespeare. The threshold was
// set from a measured run (docs/training.md): validation loss 3.91 after 150 steps, against a
// unigram entropy of the tokenized text of 5.22 nats.
// Output directories that cannot be created fail before any step runs, naming the flag and path.
TEST(Train, UnwritableOutputDirectoriesFailAtOnce) {
  const std::string file = fresh_dir("unwritable") + "/a_file";
  std::ofstream(file) << "not a directory\n";
  for (const char* flag : {"--save", "--profile"}) {
    const std::string msg = testing::error_of([&] { train(with(kTiny, {"--train-iters", "1", flag, file + "/sub"})); });
    EXPECT_NE(msg.find(std::string(flag) + " " + file + "/sub: cannot create the directory"), std::string::npos) << msg;
  }
}

TEST(Train, TinyLlamaLearnsTinyShakespeare) {
  const std::string text_path = TIDAL_SOURCE_DIR "/../shared/data/tinyshakespeare.txt";
  if (!fs::exists(text_path)) GTEST_SKIP() << "no " << text_path << " (the CI data set) on this machine";
  const std::string dir = fresh_dir("shakespeare");
  const std::string text = io::read_file(text_path);
  // 512-token BPE; one document per blank-line-separated paragraph.
  data::TrainOptions opt;
  opt.vocab_size = 512;
  const data::Tokenizer tok = data::Tokenizer::train({text}, opt);
  tok.save(dir + "/tokenizer.json");
  data::IndexedDatasetWriter w(dir + "/shakespeare", data::optimal_token_dtype(tok.vocab_size()));
  std::map<int64_t, int64_t> freq;
  int64_t total = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find("\n\n", start);
    end = end == std::string::npos ? text.size() : end + 2;
    std::vector<int64_t> ids = tok.encode(text.substr(start, end - start));
    for (int64_t id : ids) ++freq[id], ++total;
    ids.push_back(tok.eod_id());
    w.add_document(ids);
    start = end;
  }
  w.finish();
  double unigram = 0;
  for (auto& [id, n] : freq) unigram -= double(n) / double(total) * std::log(double(n) / double(total));

  TrainResult r = train({"--model",
                         "tiny-llama",
                         "--data-path",
                         dir + "/shakespeare",
                         "--tokenizer",
                         dir + "/tokenizer.json",
                         "--split",
                         "95,5",
                         "--seq-length",
                         "128",
                         "--micro-batch-size",
                         "8",
                         "--train-iters",
                         "150",
                         "--lr",
                         "3e-3",
                         "--min-lr",
                         "3e-4",
                         "--lr-warmup-iters",
                         "15",
                         "--eval-interval",
                         "150",
                         "--eval-iters",
                         "8",
                         "--log-interval",
                         "150",
                         "--seed",
                         "7"});
  std::printf("unigram entropy %.3f nats; validation loss after 150 steps %.3f\n", unigram, r.final_val_loss);
  EXPECT_GT(unigram, 5.0);
  EXPECT_LT(r.final_val_loss, 4.2);
  EXPECT_LT(r.final_val_loss, unigram - 1.0);
}

}  // namespace tidal::train

namespace tidal::train {
TEST(Train, RecomputeFlagsReportAndMetrics) {
  const std::string dir = fresh_dir("recompute");
  const std::string path = dir + "/metrics.json";
  TrainResult plain = train(with(kTiny, {"--train-iters", "3", "--attention", "eager"}));
  TrainResult r = train(with(
      kTiny, {"--train-iters", "3", "--attention", "eager", "--metrics-json", path, "--recompute-granularity", "full",
              "--recompute-method", "block", "--recompute-num-layers", "1", "--recompute-activation-function"}));
  EXPECT_EQ(r.losses, plain.losses);  // recompute changes memory and time, never numbers
  const nlohmann::json j = nlohmann::json::parse(io::read_file(path));
  const nlohmann::json& rc = j["summary"]["recompute"];
  EXPECT_EQ(rc["mode"], "full block 1 + activation-function (all layers)");
  ASSERT_EQ(rc["recomputed_layers"].size(), 2u);
  EXPECT_EQ(rc["recomputed_layers"][0]["policies"][0], "full");
  EXPECT_EQ(rc["recomputed_layers"][1]["policies"][0], "activation");
  EXPECT_GT(rc["recompute_ms"].get<double>(), 0.0);
  int64_t kept = 0, recomputed = 0, discarded = 0;
  for (const nlohmann::json& t : j["summary"]["saved_tensors"]) {
    for (const char* k : {"layer", "module", "name", "shape", "dtype", "bytes", "policy"})
      ASSERT_TRUE(t.contains(k)) << k;
    const std::string policy = t["policy"];
    if (policy == "kept") kept += t["bytes"].get<int64_t>();
    if (policy == "recomputed") ++recomputed;
    if (policy == "discarded") ++discarded;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(recomputed, 5);  // layer 0's saves
  EXPECT_EQ(discarded, 1);   // layer 1's GELU output
  EXPECT_THROW(train(with(kTiny, {"--recompute-granularity", "full"})), Error);
  EXPECT_THROW(train(with(kTiny, {"--recompute-modules", "moe"})), Error);
}

TEST(Train, ActivationOffloadKeepsLossesAndReportsItsCopies) {
  const std::string dir = fresh_dir("offload");
  const std::string path = dir + "/metrics.json";
  TrainResult plain = train(with(kTiny, {"--train-iters", "3"}));
  for (const std::string target : {"host", "disk"}) {
    std::vector<std::string> flags = with(kTiny, {"--train-iters", "3", "--metrics-json", path, "--activation-offload",
                                                  "--offload-target", target, "--offload-prefetch-depth", "2"});
    if (target == "disk") flags = with(flags, {"--offload-dir", dir});
    TrainResult r = train(flags);
    EXPECT_EQ(r.losses, plain.losses) << target;  // offload moves bytes, never changes numbers
    const nlohmann::json j = nlohmann::json::parse(io::read_file(path));
    const nlohmann::json& o = j["summary"]["offload"];
    // tiny-gpt2 has 2 layers: layer 0 is offloaded, the last layer stays.
    EXPECT_GT(o["offloaded_bytes_per_step"].get<double>(), 0.0) << target;
    EXPECT_EQ(o["kept_on_device_bytes_per_step"].get<double>(), 0.0) << target;
    EXPECT_EQ(o["in_use_bytes_per_step"].get<double>(), 0.0) << target;  // the model holds nothing back
    EXPECT_GT(o["d2h_ms"].get<double>(), 0.0) << target;
    EXPECT_GT(o["h2d_ms"].get<double>(), 0.0) << target;
    EXPECT_GE(o["overlap_fraction"].get<double>(), 0.0) << target;
    EXPECT_LE(o["overlap_fraction"].get<double>(), 1.0) << target;
    int64_t offloaded = 0;
    for (const nlohmann::json& t : j["summary"]["saved_tensors"])
      if (t["policy"] == "offloaded") {
        EXPECT_EQ(t["layer"], 0) << target;
        offloaded += t["bytes"].get<int64_t>();
      }
    EXPECT_GT(offloaded, 0) << target;
    EXPECT_EQ(j["config"]["offload"]["target"], target);
  }
  EXPECT_NE(message({"--offload-policy", "all"}).find("needs --activation-offload"), std::string::npos);
  EXPECT_NE(message({"--activation-offload", "--offload-policy", "most"}).find("valid are"), std::string::npos);
  EXPECT_NE(message({"--activation-offload", "--offload-policy", "min-bytes=x"}).find("byte count"), std::string::npos);
  EXPECT_NE(message({"--activation-offload", "--offload-target", "gpu"}).find("host or disk"), std::string::npos);
  EXPECT_NE(message({"--activation-offload", "--offload-target", "disk"}).find("--offload-dir"), std::string::npos);
  EXPECT_NE(message({"--activation-offload", "--offload-dir", "/tmp"}).find("is for --offload-target disk"),
            std::string::npos);
  EXPECT_NE(message({"--activation-offload", "--offload-host-limit", "lots"}).find("lots"), std::string::npos);
  EXPECT_NE(message({"--activation-offload", "--offload-policy", "core-attn", "--recompute-granularity", "selective"})
                .find("nothing to offload"),
            std::string::npos);
  // A spill directory that cannot be made (a file is in the way) fails when training starts.
  const std::string blocked = dir + "/a_file/x";
  std::ofstream(dir + "/a_file") << "not a directory\n";
  EXPECT_NE(message({"--activation-offload", "--offload-target", "disk", "--offload-dir", blocked}).find("no error"),
            std::string::npos);  // checked when training starts (below)
  EXPECT_THROW(train(with(kTiny, {"--train-iters", "1", "--activation-offload", "--offload-target", "disk",
                                  "--offload-dir", blocked})),
               Error);
}

TEST(Train, AMissingOffloadDirIsMadeLikeSaveAndProfile) {
  const std::string dir = fresh_dir("offload_dir") + "/not/yet";
  ASSERT_FALSE(fs::exists(dir));
  train(with(kTiny, {"--train-iters", "1", "--activation-offload", "--offload-target", "disk", "--offload-dir", dir}));
  EXPECT_TRUE(fs::is_directory(dir));
}

}  // namespace tidal::train
