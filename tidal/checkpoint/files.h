#pragma once
// What checkpoint/'s writer (save.cpp) and reader (load.cpp) share about a checkpoint's files: their
// names, their sizes and CRC-32s, and state.json. Not for use outside checkpoint/.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tidal/checkpoint/format.h"

namespace tidal::checkpoint {

inline constexpr const char* kTracker = "latest_checkpointed_iteration.txt";
// state.json holds a few settings; a larger one is not ours.
inline constexpr uintmax_t kMaxStateBytes = 16 << 20;

// "iter_0000100"
std::string iter_name(int64_t it);

struct FileSum {
  uint64_t size = 0;
  uint32_t crc = 0;
};
FileSum checksum(const std::string& path);
// state.json's record of `files` in `dir`: {"name": {"size": ..., "crc32": ...}, ...}.
nlohmann::json file_sums(const std::string& dir, const std::vector<std::string>& files);
// Checks `path` against state.json's record `info` (field `field`): its size, and with `crc` its CRC-32.
void verify_file(const std::string& path, const nlohmann::json& info, const std::string& field, bool crc);

// A small file of ours (the tracker, state.json), written atomically, and read back refused unread
// when it is not a regular file of at most `max_bytes`.
void write_text(const std::string& path, const std::string& text);
std::string read_small(const std::string& path, uintmax_t max_bytes);

// state.json's fields for `state` and the record of its files.
nlohmann::json state_record(const TrainingState& state, const nlohmann::json& files);
// A shard file's safetensors metadata: which rank of how many, and the flat range it holds.
std::map<std::string, std::string> shard_metadata(const optim::ShardLayout& layout, int rank);
// state.json's "optimizer_shards" (ranks 0 when absent: one process's optimizer.safetensors), and the
// record of it a save writes.
OptimizerShards read_shards(const nlohmann::json& state, const std::string& where);
nlohmann::json shards_record(const OptimizerShards& shards);

// state.json's fields: obj[key], which must be there; obj[key] as an object ({} when absent); a
// non-negative integer up to 2^64 - 1 (generator seeds and offsets, file sizes). Errors name `where`.
const nlohmann::json& required(const nlohmann::json& obj, const char* key, const std::string& where);
nlohmann::json object_or_empty(const nlohmann::json& obj, const char* key, const std::string& where);
uint64_t json_u64(const nlohmann::json& v, const std::string& where);

}  // namespace tidal::checkpoint
