// Files from strangers through the `tidal` binary: a hostile config.json, tokenizer.json, dataset or
// profile summary ends in exit code 1 and a message naming the file and the field, within seconds,
// never in a crash, a wrapped allocation or the JSON library's words.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/integration/run_command.h"
#include "tidal/data/indexed_dataset.h"
#include "tidal/data/tokenizer.h"
#include "tidal/models/config.h"

namespace {

using json = nlohmann::json;
using Result = tidal::testing::CommandResult;

const std::string kTidal = TIDAL_BINARY_DIR "/tidal";

class HostileInputs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(TIDAL_BINARY_DIR) + "/test_scratch/hostile_inputs";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  // Exit code 1 with `fragment` in the message, and never the JSON library's own words.
  static void expect_refused(const std::string& cmd, const std::string& fragment) {
    const Result r = tidal::testing::run_command(cmd);
    EXPECT_EQ(r.code, 1) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find(fragment), std::string::npos) << cmd << "\n" << r.output;
    EXPECT_EQ(r.output.find("json.exception"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("unexpected error"), std::string::npos) << r.output;
  }
  std::string dir_;
};

// A small trained tokenizer's tokenizer.json.
json tokenizer_json() {
  const std::vector<std::string> texts = {"the quick brown fox jumps over the lazy dog", "the lazy dog sleeps"};
  return json::parse(tidal::data::Tokenizer::train(texts, 270).to_json_string());
}

json tiny_llama() { return tidal::models::config_to_json(tidal::models::preset("tiny-llama")); }

TEST_F(HostileInputs, ConfigJsonSizesAndKindsAreRefusedByName) {
  json j = tiny_llama();
  j["intermediate_size"] = int64_t(1) << 56;
  std::string path = write("i56.json", j.dump());
  expect_refused(kTidal + " plan --config " + path,
                 "[config] " + path + " field 'intermediate_size' is 72057594037927936: it must be in [1, 1048576]");
  j = tiny_llama();
  j["num_hidden_layers"] = 1000000000;  // built layers for a minute until memory ran out
  path = write("layers.json", j.dump());
  expect_refused(kTidal + " train --config " + path + " --mock-data --train-iters 1",
                 "field 'num_hidden_layers' is 1000000000: it must be in [1, 4096]");
  j = tiny_llama();
  j["intermediate_size"] = "176";
  path = write("kind.json", j.dump());
  expect_refused(kTidal + " plan --config " + path,
                 "[config] " + path + " field 'intermediate_size' must be an integer, found a string");
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string text = "{\"rope_scaling\": " + deep + ", " + tiny_llama().dump().substr(1);
  path = write("deep.json", text);
  expect_refused(kTidal + " plan --config " + path, "[config] " + path + " is nested more than 512 levels deep");
}

TEST_F(HostileInputs, ATrillionParameterConfigStillPlans) {
  json j = tidal::models::config_to_json(tidal::models::preset("tiny-qwen3-moe"));
  const json k2 = {{"vocab_size", 163840},
                   {"hidden_size", 7168},
                   {"intermediate_size", 18432},
                   {"num_hidden_layers", 61},
                   {"num_attention_heads", 64},
                   {"num_key_value_heads", 64},
                   {"head_dim", 128},
                   {"num_experts", 384},
                   {"num_experts_per_tok", 8},
                   {"moe_intermediate_size", 2048},
                   {"max_position_embeddings", 4096}};
  j.update(k2);
  const std::string path = write("k2.json", j.dump());
  const Result r = tidal::testing::run_command(kTidal + " plan --config " + path + " --seq-length 1024 --memory 80GiB");
  EXPECT_EQ(r.code, 3) << r.output;  // it does not fit one device: planned, not refused
  EXPECT_NE(r.output.find("a training step needs about"), std::string::npos) << r.output;
}

TEST_F(HostileInputs, TokenizerIdsAreBoundedBeforeTheTableIsSized) {
  json j = tokenizer_json();
  j["added_tokens"][0]["id"] = int64_t(9223372036854775807);  // id + 1 overflowed and corrupted the heap
  std::string path = write("t63.json", j.dump());
  expect_refused(kTidal + " tokenizer info --tokenizer " + path,
                 "[tokenizer] " + path + " field 'added_tokens[0].id' is 9223372036854775807: token ids must be in");
  j["added_tokens"][0]["id"] = 260;
  j["model"]["vocab"]["!"] = 100000000;  // 6 GB from a 13 KB file
  path = write("t1e8.json", j.dump());
  expect_refused(kTidal + " tokenizer encode --tokenizer " + path + " --text hi",
                 "[tokenizer] " + path + ": an id in field 'model.vocab' is 100000000");
}

TEST_F(HostileInputs, ACorruptedIndexNamesTheFile) {
  const std::string tok = write("tok.json", tokenizer_json().dump());
  const std::string prefix = dir_ + "/d";
  {
    tidal::data::IndexedDatasetWriter w(prefix, tidal::data::TokenDType::u16);
    for (int d = 0; d < 20; ++d) w.add_document(std::vector<int64_t>(40, d));
    w.finish();
  }
  {
    std::fstream idx(prefix + ".idx", std::ios::binary | std::ios::in | std::ios::out);
    const uint64_t huge = uint64_t(1) << 62;
    idx.seekp(18);  // the sequence count
    idx.write(reinterpret_cast<const char*>(&huge), sizeof huge);
  }
  expect_refused(kTidal + " train --model tiny-gpt2 --data-path " + prefix + " --tokenizer " + tok +
                     " --seq-length 16 --train-iters 1 --no-progress",
                 "[indexed dataset] '" + prefix + ".idx': truncated: 4611686018427387904 sequences");
}

TEST_F(HostileInputs, AProfileSummaryOfTheWrongShapeIsExplained) {
  write("summary.json", R"({"version": "1"})");
  expect_refused(kTidal + " report " + dir_,
                 "tidal report: error: " + dir_ + "/summary.json field 'version' must be an integer, found a string");
  write("summary.json", R"({"version": 1, "steps": []})");
  expect_refused(kTidal + " report " + dir_, "summary.json has no field 'out_of_memory'");
  write("summary.json", R"({"version": 1, "steps": [{"phases_ms": {"forward": "slow"}, "peak_bytes": 1}],
      "out_of_memory": null, "peak": null, "activations_at_peak": null, "saved_tensors": {}, "ops": [],
      "recompute": {}, "streams": []})");
  expect_refused(kTidal + " report " + dir_, "summary.json is not a tidal profile summary (a field holds the wrong");
  write("summary.json", std::string(100000, '['));
  expect_refused(kTidal + " report " + dir_, "summary.json is nested more than 512 levels deep");
  // A count as a float beyond int64 (the profile_summary fuzzer's finding: its conversion was undefined).
  write("summary.json", R"({"version": 1, "steps": [{"phases_ms": {}, "peak_bytes": 1.7e101}],
      "out_of_memory": null, "peak": null, "activations_at_peak": null, "saved_tensors": {}, "ops": [],
      "recompute": {}, "streams": []})");
  expect_refused(kTidal + " report " + dir_, "summary.json field 'steps[0].peak_bytes' holds 1.7e+101");
}

}  // namespace

namespace {

// --max-input-bytes refuses an input above the cap by name before anything is read (prepare and tokenizer train).
TEST_F(HostileInputs, MaxInputBytesRefusesALargerFileByName) {
  const std::string input = write("big.txt", std::string(5000, 'a') + "\n");
  const std::string small = write("small.txt", "the quick brown fox\n");
  expect_refused(kTidal + " tokenizer train --input " + small + " " + input + " --vocab-size 260 --output " + dir_ +
                     "/t.json --max-input-bytes 4KiB",
                 "big.txt holds 4.88 KiB, more than --max-input-bytes 4.00 KiB");
  expect_refused(
      kTidal + " prepare --input " + input + " --tokenizer x.json --output-prefix " + dir_ + "/p --max-input-bytes 100",
      "more than --max-input-bytes 100 B");
  const Result ok = tidal::testing::run_command(kTidal + " tokenizer train --input " + small +
                                                " --vocab-size 260 --min-frequency 1 --output " + dir_ +
                                                "/t.json --max-input-bytes 4KiB");
  EXPECT_EQ(ok.code, 0) << ok.output;
}

// Host memory running out (std::bad_alloc anywhere) is the out-of-memory exit, 3, with a message, not "unexpected
// error" and exit 1: 60 MB of DNA letters (one pre-token) for BPE training under a 1.5 GB address-space limit.
TEST_F(HostileInputs, RunningOutOfHostMemoryIsTheOutOfMemoryExit) {
  std::string dna(60'000'000, 'A');
  uint64_t x = 88172645463325252ull;
  for (char& c : dna) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = "ACGT"[x & 3];
  }
  const std::string input = write("dna.txt", dna);
  const Result r = tidal::testing::run_command("ulimit -v 1500000; " + kTidal + " tokenizer train --input " + input +
                                               " --vocab-size 300 --output " + dir_ + "/dna.json");
  if (r.code == 127) GTEST_SKIP() << "tidal does not load under the limit here: " << r.output;
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("out of host memory while training on 1 input file(s) from " + input), std::string::npos)
      << r.output;
}

}  // namespace
