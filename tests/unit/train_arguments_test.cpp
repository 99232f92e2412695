// tidal train's size flags over a preset: the sizes derived from an override follow Megatron-LM's rules
// (Note [Derived sizes] in tidal/train/arguments.cpp); the preset's own values stay where nothing was overridden.
#include <gtest/gtest.h>

#include "tests/support/error_of.h"
#include "tidal/train/arguments.h"

namespace tidal::train {
namespace {

using testing::error_of;

models::ModelConfig model_of(const std::vector<std::string>& argv) {
  TrainArgs a = parse_train_args(argv);
  a.model.validate();
  return a.model;
}

TEST(TrainArguments, Gpt2HiddenSizeDerivesFourTimesTheMlp) {
  const models::ModelConfig m =
      model_of({"--model", "gpt2-124m", "--hidden-size", "256", "--num-attention-heads", "4"});
  EXPECT_EQ(m.intermediate_size, 4 * 256);  // not the preset's 3072
  EXPECT_EQ(m.head_size(), 64);
  EXPECT_EQ(m.kv_heads(), 4);
  EXPECT_EQ(m.num_hidden_layers, 12);  // not overridden: the preset's
  EXPECT_EQ(model_of({"--model", "gpt2-124m", "--hidden-size", "256", "--num-attention-heads", "4", "--ffn-hidden-size",
                      "512"})
                .intermediate_size,
            512);  // given explicitly: as given
  EXPECT_EQ(model_of({"--model", "gpt2-124m", "--num-layers", "2"}).intermediate_size, 3072);
  EXPECT_EQ(model_of({"--model", "gpt2-124m", "--num-attention-heads", "16"}).intermediate_size, 3072);
}

TEST(TrainArguments, TrainPrintsTheShapeTheSizeFlagsGave) {
  EXPECT_EQ(parse_train_args({"--model", "gpt2-124m"}).model_source, "preset gpt2-124m");
  const TrainArgs a = parse_train_args({"--model", "gpt2-124m", "--hidden-size", "256", "--num-attention-heads", "4"});
  EXPECT_EQ(a.model_source, "preset gpt2-124m: 12 layers, hidden 256, ffn 1024, 4 heads of 64 (4 key/value)");
}

TEST(TrainArguments, SwigluHiddenSizeDerivesMegatronsWidth) {
  // Megatron: int((4 * hidden * 2 / 3) / 64) * 64.
  models::ModelConfig m = model_of({"--model", "tiny-llama", "--hidden-size", "128"});
  EXPECT_EQ(m.intermediate_size, 320);  // 341.3 rounded down to a multiple of 64
  EXPECT_EQ(m.head_size(), 32);         // 128 / 4 heads
  EXPECT_EQ(m.kv_heads(), 2);           // the preset's
  m = model_of({"--model", "qwen3-8b", "--hidden-size", "2048", "--num-layers", "2"});
  EXPECT_EQ(m.intermediate_size, 5440);
  EXPECT_EQ(model_of({"--model", "qwen3-8b", "--hidden-size", "4096"}).intermediate_size, 10880);
  EXPECT_EQ(model_of({"--model", "qwen3-8b", "--hidden-size", "4096", "--ffn-hidden-size", "12288"}).intermediate_size,
            12288);
  EXPECT_EQ(model_of({"--model", "qwen3-8b", "--num-layers", "2"}).intermediate_size, 12288);  // the preset's
  const std::string narrow = error_of([] { model_of({"--model", "tiny-llama", "--hidden-size", "16"}); });
  EXPECT_NE(narrow.find("give --ffn-hidden-size"), std::string::npos) << narrow;
  m = model_of({"--model", "tiny-llama", "--hidden-size", "16", "--ffn-hidden-size", "48"});
  EXPECT_EQ(m.intermediate_size, 48);
}

// --num-layers over a sliding-window model: uniform layer types follow the new count; per-layer ones
// (which layers slide) cannot be guessed and are refused.
TEST(TrainArguments, LayerCountCarriesTheSlidingWindow) {
  const models::ModelConfig m = model_of({"--model", "tiny-mistral", "--num-layers", "5"});
  for (int64_t l = 0; l < 5; ++l) EXPECT_EQ(m.attention_window(l), 8) << l;
  models::ModelConfig mixed = models::preset("tiny-qwen2");
  mixed.sliding_window = 4;
  mixed.layer_types = {"full_attention", "sliding_attention"};
  const std::string e = error_of([&] { mixed.set_num_layers(3); });
  EXPECT_NE(e.find("layer_types gives each of the model's 2 layers its own attention"), std::string::npos) << e;
  mixed.set_num_layers(2);
  EXPECT_EQ(mixed.attention_window(1), 4);
}

TEST(TrainArguments, HeadSizeAndKeyValueHeads) {
  // qwen3-0.6b's heads are 128 wide, not hidden / heads = 64: a new hidden size or head count derives hidden / heads
  // (Megatron's kv_channels) unless --kv-channels keeps it.
  EXPECT_EQ(model_of({"--model", "qwen3-0.6b"}).head_size(), 128);
  EXPECT_EQ(model_of({"--model", "qwen3-0.6b", "--num-layers", "2"}).head_size(), 128);
  EXPECT_EQ(model_of({"--model", "qwen3-0.6b", "--hidden-size", "512"}).head_size(), 32);
  EXPECT_EQ(model_of({"--model", "qwen3-0.6b", "--hidden-size", "512", "--kv-channels", "128"}).head_size(), 128);
  // The preset's key/value heads stay: the heads must be a multiple of them (the model says so when built).
  const std::string kv = error_of([] { model_of({"--model", "qwen3-0.6b", "--num-attention-heads", "4"}); });
  EXPECT_NE(kv.find("num_attention_heads 4 is not a multiple of num_key_value_heads 8 (tidal train's "
                    "--num-query-groups)"),
            std::string::npos)
      << kv;
  models::ModelConfig m = model_of({"--model", "qwen3-0.6b", "--num-attention-heads", "4", "--num-query-groups", "2"});
  EXPECT_EQ(m.kv_heads(), 2);
  EXPECT_EQ(m.head_size(), 256);
  const std::string split = error_of([] { model_of({"--model", "qwen3-0.6b", "--num-attention-heads", "12"}); });
  EXPECT_NE(split.find("hidden_size 1024 is not divisible by num_attention_heads 12 (set head_dim, tidal train's "
                       "--kv-channels)"),
            std::string::npos)
      << split;
  m = model_of(
      {"--model", "qwen3-0.6b", "--num-attention-heads", "12", "--num-query-groups", "4", "--kv-channels", "128"});
  EXPECT_EQ(m.head_size(), 128);
  EXPECT_NE(error_of([] {
              model_of({"--model", "gpt2-124m", "--kv-channels", "32"});
            }).find("hidden / heads"),
            std::string::npos);
}

TEST(TrainArguments, MoeExpertWidthFollowsTheMlp) {
  // Megatron: moe_ffn_hidden_size = ffn_hidden_size unless given.
  models::ModelConfig m = model_of({"--model", "qwen3-30b-a3b", "--hidden-size", "1024", "--num-layers", "2"});
  EXPECT_EQ(m.intermediate_size, 2688);
  EXPECT_EQ(m.moe_intermediate_size, 2688);
  m = model_of({"--model", "qwen3-30b-a3b", "--hidden-size", "1024", "--moe-ffn-hidden-size", "768"});
  EXPECT_EQ(m.moe_intermediate_size, 768);
  EXPECT_EQ(model_of({"--model", "qwen3-30b-a3b", "--num-layers", "2"}).moe_intermediate_size, 768);
  EXPECT_NE(error_of([] {
              model_of({"--model", "tiny-gpt2", "--moe-ffn-hidden-size", "64"});
            }).find("MoE models"),
            std::string::npos);
}

// Under mpirun without --global-batch-size the global batch is Megatron's default for the world: micro-batch x
// data-parallel ranks (before, one process's micro-batch, which then failed on the flag nobody gave).
TEST(TrainArguments, TheDefaultGlobalBatchIsMicroBatchTimesDataParallelRanks) {
  const TrainArgs a = parse_train_args({"--model", "tiny-gpt2", "--micro-batch-size", "3"});
  EXPECT_FALSE(a.global_batch_given);
  EXPECT_EQ(a.global_batch_size, 3);
  EXPECT_EQ(a.on(4).global_batch_size, 12);
  const TrainArgs cp =
      parse_train_args({"--model", "tiny-gpt2", "--micro-batch-size", "3", "--context-parallel-size", "2"});
  EXPECT_EQ(cp.on(4).global_batch_size, 6);  // 4 ranks = 2 data-parallel x 2 context-parallel
  const TrainArgs given =
      parse_train_args({"--model", "tiny-gpt2", "--micro-batch-size", "3", "--global-batch-size", "24"});
  EXPECT_TRUE(given.global_batch_given);
  EXPECT_EQ(given.on(4).global_batch_size, 24);  // given: kept
}

}  // namespace
}  // namespace tidal::train
