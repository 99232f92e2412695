#include "tidal/train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tidal/base/json.h"
#include "tidal/io/atomic_file.h"
#include "tidal/io/safetensors.h"
#include "tidal/io/shown_name.h"
#include "tidal/optim/finite.h"

namespace tidal::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* kTracker = "latest_checkpointed_iteration.txt";

std::string iter_name(int64_t it) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", (long long)it);
  return buf;
}

struct FileSum {
  uint64_t size = 0;
  uint32_t crc = 0;
};

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

// state.json holds a few settings; a larger one is not ours.
constexpr uintmax_t kMaxStateBytes = 16 << 20;

// A small file of ours (the tracker, state.json), refused unread when it is not a regular file of at
// most `max_bytes`.
std::string read_small(const std::string& path, uintmax_t max_bytes) {
  std::error_code ec;
  TIDAL_CHECK(fs::is_regular_file(path, ec) && fs::file_size(path, ec) <= max_bytes && !ec, "[checkpoint] ", path,
              " is not a regular file of at most ", max_bytes, " bytes: not a checkpoint file of tidal's");
  return io::read_file(path);
}

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

// No checkpoint holds a NaN or an infinity: it would poison every run resumed from it.
void check_finite(const std::map<std::string, Tensor>& tensors, const char* what, int64_t iteration) {
  for (const auto& [name, t] : tensors)
    TIDAL_CHECK(optim::all_finite(t), "[checkpoint] refusing to save iteration ", iteration, ": ", what, " ", name,
                " holds NaN or infinite values (training diverged; --check-for-nan-in-loss-and-grad, on by default, ",
                "stops at the step that does it)");
}

void fsync_dir(const std::string& dir) {
  std::FILE* f = std::fopen(dir.c_str(), "r");
  if (f != nullptr) {
    ::fsync(fileno(f));
    std::fclose(f);
  }
}

}  // namespace

int64_t latest_iteration(const std::string& dir) {
  const std::string tracker = dir + "/" + kTracker;
  if (!fs::exists(tracker)) return -1;
  const std::string text = read_small(tracker, 64);
  try {
    size_t used = 0;
    const int64_t it = std::stoll(text, &used);
    if (it >= 0 && text.find_first_not_of(" \n", used) == std::string::npos) return it;
  } catch (const std::exception&) {
  }
  TIDAL_CHECK(false, "[checkpoint] ", tracker, " is corrupted: it should hold an iteration number and nothing else");
  return -1;
}

std::vector<std::string> prepare_save_dir(const std::string& dir) {
  io::create_directories(dir, "--save");
  const std::string probe = dir + "/.tidal-write-probe-" + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TIDAL_CHECK(fd >= 0, "--save ", dir, ": cannot write there (", std::strerror(errno), "); give a writable directory");
  ::close(fd);
  ::unlink(probe.c_str());
  // What a save killed before its rename left (save_checkpoint, io::write_atomically): never a
  // checkpoint, since the tracker only ever names a renamed one.
  std::vector<std::string> removed;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const bool partial_iter = name.rfind("iter_", 0) == 0 && name.find(".tmp-") != std::string::npos;
    const bool partial_tracker = name.rfind(std::string(kTracker) + ".tmp.", 0) == 0;
    if (!partial_iter && !partial_tracker) continue;
    std::error_code ec;
    fs::remove_all(e.path(), ec);
    TIDAL_CHECK(!ec, "--save ", dir, ": cannot remove ", name, ", left by an interrupted save (", ec.message(), ")");
    removed.push_back(name);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

void save_checkpoint(const std::string& dir, const TrainingState& state, const std::map<std::string, Tensor>& model,
                     const std::map<std::string, Tensor>& optimizer, const json& config,
                     const std::string& tokenizer_path) {
  check_finite(model, "parameter", state.iteration);
  check_finite(optimizer, "optimizer state", state.iteration);
  std::error_code ec;
  fs::create_directories(dir, ec);
  TIDAL_CHECK(!ec, "[checkpoint] cannot create ", dir, ": ", ec.message());
  const std::string final_dir = dir + "/" + iter_name(state.iteration);
  const std::string tmp = final_dir + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  TIDAL_CHECK(!ec, "[checkpoint] cannot create ", tmp, ": ", ec.message());
  try {
    io::save_safetensors(tmp + "/model.safetensors", model, {{"format", "pt"}});
    io::save_safetensors(tmp + "/optimizer.safetensors", optimizer);
    write_text(tmp + "/config.json", config.dump(2) + "\n");
    std::vector<std::string> files = {"model.safetensors", "optimizer.safetensors", "config.json"};
    if (!tokenizer_path.empty()) {
      const std::string text = io::read_file(tokenizer_path);
      write_text(tmp + "/tokenizer.json", text);
      files.push_back("tokenizer.json");
    }
    json s;
    s["iteration"] = state.iteration;
    s["rng"] = {{"seed", state.rng.seed}, {"offset", state.rng.offset}};
    s["data_position"] = state.data_position;
    s["settings"] = state.settings;
    s["extra"] = state.extra;
    for (const std::string& f : files) {
      const FileSum sum = checksum(tmp + "/" + f);
      s["files"][f] = {{"size", sum.size}, {"crc32", sum.crc}};
    }
    write_text(tmp + "/state.json", s.dump(2) + "\n");
    fsync_dir(tmp);
    if (fs::exists(final_dir)) {  // re-saving the same iteration: keep the old one until the new is in place
      const std::string old = final_dir + ".old-" + std::to_string(::getpid());
      fs::rename(final_dir, old);
      fs::rename(tmp, final_dir);
      fs::remove_all(old, ec);
    } else {
      fs::rename(tmp, final_dir);
    }
    fsync_dir(dir);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    TIDAL_CHECK(false, "[checkpoint] cannot write ", final_dir, ": ", e.what());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  write_text(dir + "/" + kTracker, std::to_string(state.iteration) + "\n");
}

Checkpoint load_checkpoint(const std::string& dir) {
  TIDAL_CHECK(fs::is_directory(dir), "[checkpoint] --load ", dir, " is not a directory");
  const int64_t it = latest_iteration(dir);
  TIDAL_CHECK(it >= 0, "[checkpoint] ", dir, " has no ", kTracker, ": no complete checkpoint was saved there");
  Checkpoint c;
  c.path = dir + "/" + iter_name(it);
  TIDAL_CHECK(fs::is_directory(c.path), "[checkpoint] ", dir, "/", kTracker, " names iteration ", it, " but ", c.path,
              " does not exist");
  const std::string state_path = c.path + "/state.json";
  const std::string where = "[checkpoint] " + state_path;
  const json s = parse_json(read_small(state_path, kMaxStateBytes), where);
  c.state.iteration = json_int(required(s, "iteration", where), where + " field 'iteration'");
  const json& rng = required(s, "rng", where);
  c.state.rng.seed = json_u64(required(rng, "seed", where + " field 'rng'"), where + " field 'rng.seed'");
  c.state.rng.offset = json_u64(required(rng, "offset", where + " field 'rng'"), where + " field 'rng.offset'");
  c.state.data_position = json_int(required(s, "data_position", where), where + " field 'data_position'");
  TIDAL_CHECK(c.state.data_position >= 0, where, " field 'data_position' is negative");
  c.state.settings = object_or_empty(s, "settings", where);
  c.state.extra = object_or_empty(s, "extra", where);
  TIDAL_CHECK(c.state.iteration == it, "[checkpoint] ", state_path, " is for iteration ", c.state.iteration,
              " but lives in ", c.path);
  const json& files = required(s, "files", where);
  TIDAL_CHECK(files.is_object(), where, " field 'files' must be an object, found ", json_kind(files));
  for (const char* needed : {"model.safetensors", "optimizer.safetensors", "config.json"})
    TIDAL_CHECK(files.contains(needed), where, " lists no ", needed);
  for (const auto& [name, info] : files.items()) {
    // Only the files a checkpoint has: a name from the file never becomes a path of its choosing.
    TIDAL_CHECK(name == "model.safetensors" || name == "optimizer.safetensors" || name == "config.json" ||
                    name == "tokenizer.json",
                where, " lists a file that is not part of a checkpoint: ", io::shown_name(name));
    const std::string path = c.path + "/" + name;
    const std::string field = where + " field 'files." + name;
    const uint64_t want_size = json_u64(required(info, "size", field + "'"), field + ".size'");
    const int64_t want_crc = json_int(required(info, "crc32", field + "'"), field + ".crc32'");
    TIDAL_CHECK(want_crc >= 0 && want_crc <= int64_t(UINT32_MAX), field, ".crc32' is not a CRC-32");
    TIDAL_CHECK(fs::is_regular_file(path), "[checkpoint] ", path, " is missing");
    const FileSum sum = checksum(path);
    TIDAL_CHECK(sum.size == want_size, "[checkpoint] ", path, " is truncated or was changed: ", sum.size,
                " bytes, the checkpoint recorded ", want_size);
    TIDAL_CHECK(sum.crc == uint32_t(want_crc), "[checkpoint] ", path,
                " is corrupted: its CRC-32 does not match the one recorded when it was saved");
  }
  c.model = io::load_safetensors(c.path + "/model.safetensors").tensors;
  c.optimizer = io::load_safetensors(c.path + "/optimizer.safetensors").tensors;
  c.config = parse_json(io::read_file(c.path + "/config.json"), "[checkpoint] " + c.path + "/config.json");
  if (files.contains("tokenizer.json")) c.tokenizer_path = c.path + "/tokenizer.json";
  return c;
}

}  // namespace tidal::train
