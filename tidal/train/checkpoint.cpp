#include "tidal/train/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tidal/io/atomic_file.h"
#include "tidal/io/safetensors.h"

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
  const std::string text = io::read_file(tracker);
  try {
    size_t used = 0;
    const int64_t it = std::stoll(text, &used);
    if (it >= 0) return it;
  } catch (const std::exception&) {
  }
  TIDAL_CHECK(false, "[checkpoint] ", tracker, " is corrupted: it should hold an iteration number, holds '",
              text.substr(0, 40), "'");
  return -1;
}

void save_checkpoint(const std::string& dir, const TrainingState& state, const std::map<std::string, Tensor>& model,
                     const std::map<std::string, Tensor>& optimizer, const json& config,
                     const std::string& tokenizer_path) {
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
  json s;
  try {
    s = json::parse(io::read_file(state_path));
    c.state.iteration = s.at("iteration").get<int64_t>();
    c.state.rng.seed = s.at("rng").at("seed").get<uint64_t>();
    c.state.rng.offset = s.at("rng").at("offset").get<uint64_t>();
    c.state.data_position = s.at("data_position").get<int64_t>();
    c.state.settings = s.value("settings", json::object());
    c.state.extra = s.value("extra", json::object());
  } catch (const json::exception& e) {
    TIDAL_CHECK(false, "[checkpoint] ", state_path, " is corrupted: ", e.what());
  }
  TIDAL_CHECK(c.state.iteration == it, "[checkpoint] ", state_path, " is for iteration ", c.state.iteration,
              " but lives in ", c.path);
  TIDAL_CHECK(s.contains("files") && s["files"].is_object(), "[checkpoint] ", state_path, " lists no files");
  for (auto& [name, info] : s["files"].items()) {
    const std::string path = c.path + "/" + name;
    TIDAL_CHECK(fs::exists(path), "[checkpoint] ", path, " is missing");
    const FileSum sum = checksum(path);
    const uint64_t want_size = info.at("size").get<uint64_t>();
    TIDAL_CHECK(sum.size == want_size, "[checkpoint] ", path, " is truncated or was changed: ", sum.size,
                " bytes, the checkpoint recorded ", want_size);
    TIDAL_CHECK(sum.crc == info.at("crc32").get<uint32_t>(), "[checkpoint] ", path,
                " is corrupted: its CRC-32 does not match the one recorded when it was saved");
  }
  c.model = io::load_safetensors(c.path + "/model.safetensors").tensors;
  c.optimizer = io::load_safetensors(c.path + "/optimizer.safetensors").tensors;
  try {
    c.config = json::parse(io::read_file(c.path + "/config.json"));
  } catch (const json::exception& e) {
    TIDAL_CHECK(false, "[checkpoint] ", c.path, "/config.json is corrupted: ", e.what());
  }
  if (s["files"].contains("tokenizer.json")) c.tokenizer_path = c.path + "/tokenizer.json";
  return c;
}

}  // namespace tidal::train
