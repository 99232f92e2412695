// safetensors and Hugging Face model directories from strangers: every malformed header, layout and
// shard path ends in an error that names the file and the field, never in a crash, a huge allocation or
// an echo of the file's contents.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/error_of.h"
#include "tidal/io/safetensors.h"
#include "tidal/models/pretrained.h"

namespace tidal::io {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

std::string fresh_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "tidal_st_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A safetensors file with this header text and `data_bytes` zero bytes of data; `claimed` replaces
// the header length when given.
std::string write_file(const std::string& name, const std::string& header, size_t data_bytes,
                       uint64_t claimed = UINT64_MAX) {
  const std::string path = ::testing::TempDir() + "tidal_st_" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  const uint64_t len = claimed == UINT64_MAX ? header.size() : claimed;
  f.write(reinterpret_cast<const char*>(&len), 8);
  f << header << std::string(data_bytes, '\0');
  return path;
}

std::string load_error(const std::string& header, size_t data_bytes, uint64_t claimed = UINT64_MAX) {
  const std::string path = write_file("t.safetensors", header, data_bytes, claimed);
  return error_of([&] { load_safetensors(path); });
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(SafetensorsHardening, AValidFileLoads) {
  const std::string path =
      write_file("ok.safetensors",
                 R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I64","shape":[],)"
                 R"("data_offsets":[8,16]},"e":{"dtype":"BF16","shape":[0,3],"data_offsets":[16,16]},)"
                 R"("__metadata__":{"format":"pt"}})",
                 16);
  const Safetensors st = load_safetensors(path);
  EXPECT_EQ(st.tensors.size(), 3u);
  EXPECT_EQ(st.tensors.at("e").numel(), 0);
  EXPECT_EQ(st.metadata.at("format"), "pt");
}

// Rows of a tensor (expert parallelism's slabs): only those rows are read, equal to the whole tensor's rows, in
// every dtype (F16 widened to f32 as whole); a range outside the tensor is refused naming it.
TEST(SafetensorsHardening, RowsOfATensorAreReadAlone) {
  const std::string path = ::testing::TempDir() + "tidal_st_rows.safetensors";
  std::vector<double> v(4 * 3 * 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(i) - 7.5;
  save_safetensors(path, {{"w", from_vector(v, {4, 3, 2})},
                          {"h", from_vector(v, {4, 3, 2}, DType::bf16)},
                          {"n", from_vector(std::vector<double>{1, 2}, {2})}});
  const Safetensors whole = load_safetensors(path);
  const SelectRows rows = [](const std::string& name) -> std::optional<RowRange> {
    if (name == "n") return std::nullopt;
    return RowRange{1, 2};
  };
  const Safetensors part = load_safetensors(path, {}, rows);
  for (const char* name : {"w", "h"}) {
    const Tensor& t = part.tensors.at(name);
    EXPECT_EQ(t.shape(), Shape({2, 3, 2})) << name;
    EXPECT_EQ(t.to_vector<double>(), whole.tensors.at(name).narrow(0, 1, 2).to_vector<double>()) << name;
  }
  EXPECT_EQ(part.tensors.at("n").shape(), Shape({2}));
  const std::string e = error_of([&] {
    load_safetensors(path, {}, [](const std::string&) { return std::optional<RowRange>(RowRange{3, 2}); });
  });
  EXPECT_TRUE(has(e, "has no rows [3, 5)")) << e;
}

TEST(SafetensorsHardening, TheHeaderLengthIsCheckedBeforeAnythingIsRead) {
  // 200 MB claimed in a file of a few bytes: refused by the limit, not by a failed allocation.
  EXPECT_TRUE(has(load_error("{}", 0, 200'000'000), "more than the 100000000 allowed"));
  EXPECT_TRUE(has(load_error("{}", 0, 1000), "truncated or not a safetensors file"));
  EXPECT_TRUE(has(load_error("{}", 0, UINT64_MAX - 1), "more than the 100000000 allowed"));
  const std::string tiny = fresh_dir("tiny") + "/x.safetensors";
  std::ofstream(tiny) << "abc";
  EXPECT_TRUE(has(error_of([&] { load_safetensors(tiny); }), "not even the 8-byte header length"));
  EXPECT_TRUE(has(error_of([&] { load_safetensors("/dev/zero"); }), "/dev/zero is not a regular file"));
}

TEST(SafetensorsHardening, HeaderErrorsNameTheFieldAndNeverEchoTheFile) {
  const std::string secret = "root:x:0:0:secret";
  EXPECT_FALSE(has(load_error(secret, 0), "secret"));
  EXPECT_TRUE(has(load_error(secret, 0), "is not valid JSON (syntax error near byte"));
  EXPECT_TRUE(has(load_error("[1,2]", 0), "the header must be a JSON object, found an array"));
  // A deeply nested __metadata__ value is refused by the parser, never serialized into a message.
  const std::string deep = R"({"__metadata__":{"k":)" + std::string(100000, '[') + std::string(100000, ']') + "}}";
  EXPECT_TRUE(has(load_error(deep, 0), "nested more than 512 levels"));
  const std::string msg = load_error(R"({"__metadata__":{"k":{"secret":1}}})", 0);
  EXPECT_TRUE(has(msg, "__metadata__ field 'k' must be a string, found an object")) << msg;
  EXPECT_FALSE(has(msg, "secret")) << msg;
  EXPECT_TRUE(has(load_error(R"({"__metadata__":[1]})", 0), "__metadata__ must be an object of strings"));
  EXPECT_TRUE(has(load_error(R"({"a":{"dtype":"F32","shape":[1]}})", 0), "tensor 'a' lacks dtype"));
  EXPECT_TRUE(has(load_error(R"({"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1),
                  "tensor 'a' has a dtype tidal does not read"));
  EXPECT_TRUE(has(load_error(R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4),
                  "tensor 'a' dtype must be a string, found an integer"));
  EXPECT_TRUE(has(load_error(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "negative dimension"));
  EXPECT_TRUE(has(load_error(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
                  "shape[0] must be an integer, found a fractional number"));
  EXPECT_TRUE(has(load_error(R"({"a":{"dtype":"F32","shape":"4","data_offsets":[0,4]}})", 4),
                  "shape must be an array of integers, found a string"));
  EXPECT_TRUE(has(load_error(R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", 4),
                  "more than the 8 allowed"));
  // A tensor name from the file is shown cut to 64 characters.
  const std::string long_name(5000, 'n');
  std::string header = "{\"";
  header.append(long_name).append(R"(":{"dtype":"F32","shape":[1]}})");
  const std::string cut = load_error(header, 0);
  std::string shown = "'";
  shown.append(64, 'n').append("...'");
  EXPECT_TRUE(has(cut, shown)) << cut.substr(0, 200);
  EXPECT_FALSE(has(cut, std::string(65, 'n')));
}

TEST(SafetensorsHardening, SizesAreCheckedForOverflow) {
  // 2^62 x 4 bytes wraps to 0 in 64 bits: it must not match data_offsets [0, 0].
  EXPECT_TRUE(
      has(load_error(R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0), "overflows"));
  EXPECT_TRUE(
      has(load_error(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0), "overflows"));
  EXPECT_TRUE(has(load_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
                  "is F32 (2) (8 bytes) but its data_offsets span 4 bytes"));
  EXPECT_TRUE(has(load_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})", 4),
                  "too large for a 64-bit integer"));
  EXPECT_TRUE(has(load_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 4), "invalid data_offsets"));
  EXPECT_TRUE(has(load_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 4), "more than the 2"));
}

TEST(SafetensorsHardening, OffsetsMustTileTheDataSection) {
  const std::string a0 = R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  EXPECT_TRUE(has(load_error("{" + a0 + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12),
                  "tensor 'b' starts at byte 8 of the data section but the tensors before it end at 4 (a hole)"));
  EXPECT_TRUE(
      has(load_error("{" + a0 + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", 8), "(they overlap)"));
  EXPECT_TRUE(
      has(load_error("{" + a0 + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4), "(they overlap)"));
  EXPECT_TRUE(has(load_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
                  "starts at byte 4 of the data section but the tensors before it end at 0"));
  EXPECT_TRUE(has(load_error("{" + a0 + "}", 12), "has trailing bytes: the tensors cover 4 bytes but the data "));
  EXPECT_TRUE(has(load_error("{" + a0 + "}", 2), "is truncated: the tensors cover 4 bytes but the data section has 2"));
}

}  // namespace
}  // namespace tidal::io

namespace tidal::models {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

// A tiny model saved as a Hugging Face directory, its weights moved to a shard listed by an index
// whose weight_map points every tensor at `shard_name`.
std::string sharded_dir(const std::string& name, const std::string& shard_name) {
  const std::string dir = ::testing::TempDir() + "tidal_st_pretrained_" + name;
  fs::remove_all(dir);
  save_pretrained(*create_model(preset("tiny-gpt2")), dir);
  fs::rename(dir + "/model.safetensors", dir + "/model-00001-of-00001.safetensors");
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"metadata":{},"weight_map":{"transformer.wte.weight":")" << shard_name << R"("}})";
  return dir;
}

TEST(PretrainedHardening, AShardedDirectoryLoads) {
  const std::string dir = sharded_dir("ok", "model-00001-of-00001.safetensors");
  EXPECT_GT(load_pretrained_dir(dir).weights.size(), 3u);
}

TEST(PretrainedHardening, ShardPathsStayInsideTheModelDirectory) {
  for (const std::string bad : {"../../../dev/zero", "../../etc/passwd", "/etc/passwd", "sub/../../x.safetensors"}) {
    const std::string msg = error_of([&] { load_pretrained_dir(sharded_dir("bad", bad)); });
    EXPECT_TRUE(msg.find("model.safetensors.index.json weight_map entry 'transformer.wte.weight' names the file '" +
                         bad + "': shards must be plain names inside the model directory") != std::string::npos)
        << msg;
    EXPECT_EQ(msg.find("root:"), std::string::npos) << msg;
  }
}

TEST(PretrainedHardening, SymlinksOutOfTheDirectoryAreRefused) {
  const std::string outside = ::testing::TempDir() + "tidal_st_outside.safetensors";
  const std::string dir = sharded_dir("symlink", "link.safetensors");
  fs::copy_file(dir + "/model-00001-of-00001.safetensors", outside, fs::copy_options::overwrite_existing);
  fs::create_symlink(outside, dir + "/link.safetensors");
  std::string msg = error_of([&] { load_pretrained_dir(dir); });
  EXPECT_TRUE(msg.find("names 'link.safetensors', which is a symlink to a file outside") != std::string::npos) << msg;
  // A symlink inside the directory is fine (the Hub's snapshots link into their blobs/ the same way).
  fs::remove(dir + "/link.safetensors");
  fs::create_symlink("model-00001-of-00001.safetensors", dir + "/link.safetensors");
  EXPECT_GT(load_pretrained_dir(dir).weights.size(), 3u);
  // A single model.safetensors that links out, to a device or to a secret.
  fs::remove(dir + "/model.safetensors.index.json");
  fs::create_symlink("/dev/zero", dir + "/model.safetensors");
  msg = error_of([&] { load_pretrained_dir(dir); });
  EXPECT_TRUE(msg.find("which is a symlink to a file outside") != std::string::npos) << msg;
  fs::remove(dir + "/model.safetensors");
  fs::create_symlink("/etc/passwd", dir + "/model.safetensors");
  msg = error_of([&] { load_pretrained_dir(dir); });
  EXPECT_TRUE(msg.find("which is a symlink to a file outside") != std::string::npos) << msg;
  EXPECT_EQ(msg.find("root:"), std::string::npos) << msg;
}

TEST(PretrainedHardening, HubCacheSnapshotsMayLinkIntoTheirBlobs) {
  const std::string repo = ::testing::TempDir() + "tidal_st_hub/models--org--tiny";
  fs::remove_all(repo);
  fs::create_directories(repo + "/blobs");
  const std::string snap = repo + "/snapshots/abc123";
  save_pretrained(*create_model(preset("tiny-gpt2")), snap);
  fs::rename(snap + "/model.safetensors", repo + "/blobs/0123");
  fs::create_symlink("../../blobs/0123", snap + "/model.safetensors");
  EXPECT_GT(load_pretrained_dir(snap).weights.size(), 3u);
}

TEST(PretrainedHardening, IndexErrorsNameTheFieldAndNeverEchoIt) {
  const std::string dir = sharded_dir("index", "x");
  std::ofstream(dir + "/model.safetensors.index.json") << R"({"weight_map":{"a":{"secret":1}}})";
  std::string msg = error_of([&] { load_pretrained_dir(dir); });
  EXPECT_TRUE(msg.find("weight_map entry 'a' must be a string, found an object") != std::string::npos) << msg;
  EXPECT_EQ(msg.find("secret"), std::string::npos) << msg;
  std::ofstream(dir + "/model.safetensors.index.json") << R"({"weight_map":[]})";
  msg = error_of([&] { load_pretrained_dir(dir); });
  EXPECT_TRUE(msg.find("has no weight_map object, found an array") != std::string::npos) << msg;
  std::ofstream(dir + "/model.safetensors.index.json") << "secret garbage";
  msg = error_of([&] { load_pretrained_dir(dir); });
  EXPECT_TRUE(msg.find("is not valid JSON") != std::string::npos) << msg;
  EXPECT_EQ(msg.find("secret"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tidal::models
