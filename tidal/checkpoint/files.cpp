#include "tidal/checkpoint/files.h"

#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "tidal/base/checked_math.h"
#include "tidal/base/error.h"
#include "tidal/base/json.h"
#include "tidal/io/atomic_file.h"

namespace tidal::checkpoint {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Models of up to 2^45 parameters (35 trillion): beyond that a layout is not ours (and 2^45 times
// kMaxCheckpointRanks stays far from int64's end in make_shard_layout's arithmetic).
constexpr int64_t kMaxElements = int64_t(1) << 45;

}  // namespace

// obj[key], which must be there.
const json& required(const json& obj, const char* key, const std::string& where) {
  const json* v = json_find(obj, key, where);
  TIDAL_CHECK(v != nullptr, where, " has no field '", key, "'");
  return *v;
}

// obj[key] as an object ({} when absent).
json object_or_empty(const json& obj, const char* key, const std::string& where) {
  const json* v = json_find(obj, key, where);
  if (v == nullptr) return json::object();
  TIDAL_CHECK(v->is_object(), where, " field '", key, "' must be an object, found ", json_kind(*v));
  return *v;
}

// A non-negative integer up to 2^64 - 1 (generator seeds and offsets, file sizes).
uint64_t json_u64(const json& v, const std::string& where) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  const int64_t x = json_int(v, where);
  TIDAL_CHECK(x >= 0, where, " is negative");
  return uint64_t(x);
}

std::string iter_name(int64_t it) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", (long long)it);
  return buf;
}

FileSum checksum(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TIDAL_CHECK(f.good(), "[checkpoint] cannot read ", path);
  FileSum s;
  std::vector<char> buf(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  while (f) {
    f.read(buf.data(), std::streamsize(buf.size()));
    const std::streamsize n = f.gcount();
    if (n <= 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), uInt(n));
    s.size += uint64_t(n);
  }
  s.crc = uint32_t(crc);
  return s;
}

void write_text(const std::string& path, const std::string& text) {
  io::write_atomically(path, [&](int fd) { io::write_all(fd, text.data(), text.size(), path); });
}

// A small file of ours (the tracker, state.json), refused unread when it is not a regular file of at
// most `max_bytes`.
std::string read_small(const std::string& path, uintmax_t max_bytes) {
  std::error_code ec;
  TIDAL_CHECK(fs::is_regular_file(path, ec) && fs::file_size(path, ec) <= max_bytes && !ec, "[checkpoint] ", path,
              " is not a regular file of at most ", max_bytes, " bytes: not a checkpoint file of tidal's");
  return io::read_file(path);
}

// state.json's record of `files` in `tmp`.
json file_sums(const std::string& tmp, const std::vector<std::string>& files) {
  json out = json::object();
  for (const std::string& f : files) {
    const FileSum sum = checksum(tmp + "/" + f);
    out[f] = {{"size", sum.size}, {"crc32", sum.crc}};
  }
  return out;
}

json state_record(const TrainingState& state, const json& files) {
  json s;
  s["iteration"] = state.iteration;
  s["rng"] = {{"seed", state.rng.seed}, {"offset", state.rng.offset}};
  s["data_position"] = state.data_position;
  s["settings"] = state.settings;
  s["extra"] = state.extra;
  s["files"] = files;
  return s;
}

std::map<std::string, std::string> shard_metadata(const optim::ShardLayout& layout, int rank) {
  return {{"rank", std::to_string(rank)},
          {"ranks", std::to_string(layout.ranks())},
          {"begin", std::to_string(layout.shard_begin(rank))},
          {"end", std::to_string(layout.shard_begin(rank) + layout.shard_size(rank))}};
}

// Checks `path` against state.json's record `info` (field `field`): its size, and with `crc` its CRC-32.
void verify_file(const std::string& path, const json& info, const std::string& field, bool crc) {
  const uint64_t want_size = json_u64(required(info, "size", field + "'"), field + ".size'");
  const int64_t want_crc = json_int(required(info, "crc32", field + "'"), field + ".crc32'");
  TIDAL_CHECK(want_crc >= 0 && want_crc <= int64_t(UINT32_MAX), field, ".crc32' is not a CRC-32");
  TIDAL_CHECK(fs::is_regular_file(path), "[checkpoint] ", path, " is missing");
  if (!crc) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(path, ec);
    TIDAL_CHECK(!ec && size == want_size, "[checkpoint] ", path, " is truncated or was changed: ", size,
                " bytes, the checkpoint recorded ", want_size);
    return;
  }
  const FileSum sum = checksum(path);
  TIDAL_CHECK(sum.size == want_size, "[checkpoint] ", path, " is truncated or was changed: ", sum.size,
              " bytes, the checkpoint recorded ", want_size);
  TIDAL_CHECK(sum.crc == uint32_t(want_crc), "[checkpoint] ", path,
              " is corrupted: its CRC-32 does not match the one recorded when it was saved");
}

// state.json's "optimizer_shards" (ranks 0 when absent: one process's optimizer.safetensors).
OptimizerShards read_shards(const json& s, const std::string& where) {
  OptimizerShards o;
  const json* v = json_find(s, "optimizer_shards", where);
  if (v == nullptr) return o;
  const std::string field = where + " field 'optimizer_shards";
  TIDAL_CHECK(v->is_object(), field, "' must be an object, found ", json_kind(*v));
  const int64_t ranks = json_int(required(*v, "ranks", field + "'"), field + ".ranks'");
  TIDAL_CHECK(ranks >= 1 && ranks <= kMaxCheckpointRanks, field, ".ranks' must be in [1, ", kMaxCheckpointRanks,
              "], got ", ranks);
  o.ranks = int(ranks);
  o.align = json_int(required(*v, "align", field + "'"), field + ".align'");
  TIDAL_CHECK(o.align >= 1 && o.align <= kMaxElements, field, ".align' must be in [1, 2^45], got ", o.align);
  const json& params = required(*v, "parameters", field + "'");
  TIDAL_CHECK(params.is_array() && !params.empty(), field, ".parameters' must be a non-empty array, found ",
              json_kind(params));
  int64_t total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string at = field + ".parameters[" + std::to_string(i) + "]'";
    const json& p = params[i];
    TIDAL_CHECK(p.is_array() && p.size() == 2, at, " must be [name, numel], found ", json_kind(p));
    const std::string name = json_string(p[0], at + " name");
    const int64_t numel = json_int(p[1], at + " numel");
    TIDAL_CHECK(numel >= 0, at, " numel is negative");
    total = checked_add(total, numel, at);
    TIDAL_CHECK(total <= kMaxElements, field, ".parameters' holds more than 2^45 elements: not a model's");
    o.parameters.emplace_back(name, numel);
  }
  return o;
}

json shards_record(const OptimizerShards& shards) {
  json params = json::array();
  for (const auto& [name, numel] : shards.parameters) params.push_back({name, numel});
  return {{"ranks", shards.ranks}, {"align", shards.align}, {"parameters", params}};
}

}  // namespace tidal::checkpoint
