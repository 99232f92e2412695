// Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/) with tidal's own writers,
// plus a few hand-written variants, and tests/fuzz/flags.dict from `tidal train`'s flag table. Run by
// hand after a format change (docs/reliability.md, Fuzzing): tidal_fuzz_seeds tests/fuzz
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fuzz/checkpoint_fixture.h"
#include "tests/fuzz/fuzz_support.h"
#include "tidal/data/indexed_dataset.h"
#include "tidal/data/tokenizer.h"
#include "tidal/io/atomic_file.h"
#include "tidal/io/safetensors.h"
#include "tidal/models/config.h"
#include "tidal/train/arguments.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace tidal;
using namespace std::string_literals;

namespace {

void write_text(const std::string& path, const std::string& text) {
  fuzz::write_bytes(path, reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

// A safetensors file by hand: 8-byte little-endian header length, the header, the data.
std::string raw_safetensors(const std::string& header, const std::string& payload) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  return out + header + payload;
}

void safetensors_seeds(const std::string& dir) {
  io::save_safetensors(dir + "/f32_i64.safetensors",
                       {{"lm_head.weight", from_vector({1, -2, 3.5, 0, 1e-3, 7}, {2, 3})},
                        {"position_ids", from_vector_i64({0, 1, 2}, {3})}},
                       {{"format", "pt"}});
  io::save_safetensors(dir + "/dtypes.safetensors", {{"bf16", from_vector({1, 2}, {2}, DType::bf16)},
                                                     {"f64", from_vector({0.5}, {1, 1}, DType::f64)},
                                                     {"i32", from_vector({-1, 2, 3}, {3}, DType::i32)},
                                                     {"u8", from_vector({255, 0}, {2}, DType::u8)},
                                                     {"scalar", scalar_tensor(3)}});
  io::save_safetensors(dir + "/empty.safetensors", {});
  write_text(dir + "/f16_bool.safetensors",
             raw_safetensors(R"({"__metadata__":{"k":"v"},"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"BOOL","shape":[2],"data_offsets":[4,6]}})",
                             std::string("\x00\x3c\x00\xc0\x01\x00", 6)));
}

void config_seeds(const std::string& dir) {
  for (const char* name : {"tiny-gpt2", "tiny-llama", "tiny-qwen3", "tiny-qwen3-moe", "tiny-mistral", "tiny-qwen2",
                           "tiny-gemma3", "tiny-deepseek-v3"})
    write_text(dir + "/" + name + ".json", models::config_to_json(models::preset(name)).dump(1) + "\n");
  // What the Hub's gpt2 config.json looks like (other field names, n_inner null).
  write_text(
      dir + "/hf-gpt2.json",
      R"({"architectures":["GPT2LMHeadModel"],"model_type":"gpt2","vocab_size":50,"n_embd":16,"n_layer":1,)"
      R"("n_head":2,"n_inner":null,"n_positions":32,"layer_norm_epsilon":1e-05,"activation_function":"gelu_new",)"
      R"("attn_pdrop":0.1,"resid_pdrop":0.1,"embd_pdrop":0.1,"tie_word_embeddings":true})"
      "\n");
  // A transformers 5 Qwen2 with one sliding layer of two (use_sliding_window, layer_types, rope_parameters).
  write_text(
      dir + "/hf-qwen2-sliding.json",
      R"({"model_type":"qwen2","vocab_size":64,"hidden_size":32,"intermediate_size":64,"num_hidden_layers":2,)"
      R"("num_attention_heads":4,"num_key_value_heads":2,"max_position_embeddings":128,"use_sliding_window":true,)"
      R"("sliding_window":4,"max_window_layers":1,"layer_types":["full_attention","sliding_attention"],)"
      R"("rope_parameters":{"rope_type":"default","rope_theta":10000.0},"tie_word_embeddings":false})"
      "\n");
  // A multimodal Gemma 3 (its language model in text_config, the vision tower's fields beside it).
  write_text(dir + "/hf-gemma3-multimodal.json",
             R"({"model_type":"gemma3","architectures":["Gemma3ForConditionalGeneration"],"boi_token_index":100,)"
             R"("eoi_token_index":101,"image_token_index":102,"mm_tokens_per_image":4,"tie_word_embeddings":true,)"
             R"("vision_config":{"model_type":"siglip_vision_model","hidden_size":16},"text_config":{"model_type":)"
             R"("gemma3_text","vocab_size":64,"hidden_size":32,"intermediate_size":64,"num_hidden_layers":2,)"
             R"("num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"sliding_window":5,"layer_types":)"
             R"(["sliding_attention","full_attention"],"query_pre_attn_scalar":12}})"
             "\n");
}

void tokenizer_seeds(const std::string& dir) {
  const std::vector<std::string> texts = {"the cat sat on the mat. the cat ate the rat.",
                                          "caf\xc3\xa9 na\xc3\xafve 123 456", "  spaces\tand\nnewlines  "};
  const std::string plain = data::Tokenizer::train(texts, 290).to_json_string();
  write_text(dir + "/bpe.json", plain);
  // Qwen-style: NFC, a Split regex then ByteLevel without its own regex, merges as pairs, an added token.
  json j = json::parse(plain);
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern",
          {{"Regex", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s+)"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}};
  json pairs = json::array();
  for (const json& m : j["model"]["merges"]) {
    const std::string s =
        m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>();
    pairs.push_back({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  j["model"]["merges"] = pairs;
  j["added_tokens"].push_back({{"id", 290},
                               {"content", "<|im_start|>"},
                               {"single_word", false},
                               {"lstrip", true},
                               {"rstrip", false},
                               {"normalized", false},
                               {"special", true}});
  write_text(dir + "/qwen-style.json", j.dump() + "\n");
}

// The target's layout: a 2-byte little-endian .bin length, the .idx, the .bin.
void indexed_dataset_seed(const std::string& dir, const std::string& name, data::TokenDType dtype,
                          const std::vector<std::vector<std::vector<int64_t>>>& documents) {
  const std::string prefix = fuzz::scratch_dir() + "/seed";
  data::IndexedDatasetWriter w(prefix, dtype);
  for (const auto& doc : documents) {
    for (const auto& seq : doc) w.add_sequence(seq);
    w.end_document();
  }
  w.finish();
  const std::string idx = io::read_file(prefix + ".idx"), bin = io::read_file(prefix + ".bin");
  std::string out = {char(bin.size() & 0xff), char(bin.size() >> 8)};
  write_text(dir + "/" + name, out + idx + bin);
}

void indexed_dataset_seeds(const std::string& dir) {
  indexed_dataset_seed(dir, "uint16", data::TokenDType::u16, {{{1, 2, 3}, {4, 5}}, {{6}}, {{7, 8, 9, 10}}});
  indexed_dataset_seed(dir, "int32", data::TokenDType::i32, {{{100000, 2}}, {{3, 4, 5}}});
  indexed_dataset_seed(dir, "uint8", data::TokenDType::u8, {{{1}}, {{2, 3}, {4}}});
}

// JSON Lines (jsonl.cpp's layout: a flag byte, then the file): plain with a bad line, and gzip.
void jsonl_seeds(const std::string& dir) {
  const std::string text =
      "{\"text\": \"one\", \"title\": \"A\"}\n\n{\"text\": 5}\nnot json\n"
      "{\"title\": \"\\u00e9\", \"text\": \"two\\nlines\"}";
  write_text(dir + "/plain_fail.bin", std::string(1, '\0') + text);
  write_text(dir + "/plain_skip.bin", std::string(1, '\2') + text);
  const std::string gz = fuzz::scratch_dir() + "/seed.jsonl.gz";
  gzFile f = gzopen(gz.c_str(), "wb");
  gzwrite(f, text.data(), unsigned(text.size()));
  gzclose(f);
  std::ifstream in(gz, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write_text(dir + "/gzip_skip.bin", std::string(1, '\3') + bytes);
}

void checkpoint_seeds(const std::string& dir) {
  const std::string ckpt = fuzz::save_fixture_checkpoint(fuzz::scratch_dir() + "/ckpt");
  fs::copy_file(ckpt + "/iter_0000000/state.json", dir + "/state.json", fs::copy_options::overwrite_existing);
}

void flag_seeds(const std::string& dir, const std::string& dict) {
  const std::vector<std::pair<std::string, std::string>> lines = {
      {"preset", "--model tiny-gpt2 --train-iters 10 --seq-length 32 --micro-batch-size 2 --global-batch-size 4"},
      {"mock", "--mock-data --vocab-size 300 --num-layers 2 --hidden-size 64 --num-attention-heads 4 --lr 1e-3"},
      {"moe",
       "--model tiny-qwen3-moe --moe-ffn-hidden-size 32 --num-query-groups 2 --kv-channels 16 "
       "--recompute-granularity selective --recompute-modules core_attn,mlp --loss-compute-mode chunk "
       "--loss-chunk-size 64 --swap-optimizer --swap-optimizer-times 4"},
      {"offload",
       "--model tiny-llama --activation-offload --offload-policy min-bytes=1024 --offload-host-limit 4GiB "
       "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --attention eager"},
      {"schedule",
       "--model=tiny-qwen3\0--lr-decay-style\0linear\0--lr-warmup-iters\0005\0--min-lr\0001e-5\0--clip-grad\0000 "
       "--save ckpt --save-interval 5 --profile prof --profile-steps 2:3 --sample-prompt Hi --sample-tokens 4"s},
  };
  for (const auto& [name, text] : lines) write_text(dir + "/" + name, text);
  // Every flag name, for -dict.
  std::ostringstream out;
  out << "# tidal train's flags (written by tidal_fuzz_seeds from train_flags())\n";
  const std::string help = train::train_flags().help();
  const std::regex name_re("--[a-z0-9-]+");
  std::set<std::string> seen;
  for (auto it = std::sregex_iterator(help.begin(), help.end(), name_re); it != std::sregex_iterator(); ++it)
    if (seen.insert(it->str()).second) out << "\"" << it->str() << "\"\n";
  for (const char* v : {"tiny-gpt2", "tiny-llama", "tiny-qwen3-moe", "qwen3-30b-a3b", "1099511627776", "-1", "0",
                        "1e308", "nan", "inf", "full", "selective", "block", "uniform", "chunk", "disk", "GiB", ":"})
    out << "\"" << v << "\"\n";
  write_text(dict, out.str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: tidal_fuzz_seeds tests/fuzz\n");
    return 2;
  }
  const std::string root = argv[1];
  const auto corpus = [&](const std::string& target) {
    const std::string dir = root + "/corpus/" + target;
    fs::create_directories(dir);
    return dir;
  };
  safetensors_seeds(corpus("safetensors"));
  config_seeds(corpus("config"));
  tokenizer_seeds(corpus("tokenizer"));
  indexed_dataset_seeds(corpus("indexed_dataset"));
  checkpoint_seeds(corpus("checkpoint"));
  jsonl_seeds(corpus("jsonl"));
  flag_seeds(corpus("flags"), root + "/flags.dict");
  std::printf("seeds written under %s/corpus\n", root.c_str());
  return 0;
}
