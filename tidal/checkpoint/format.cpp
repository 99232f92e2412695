#include "tidal/checkpoint/format.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "tidal/base/error.h"
#include "tidal/checkpoint/files.h"
#include "tidal/io/atomic_file.h"

namespace tidal::checkpoint {

namespace fs = std::filesystem;

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

optim::ShardLayout OptimizerShards::layout() const {
  std::vector<int64_t> numels;
  for (const auto& [name, numel] : parameters) numels.push_back(numel);
  return optim::make_shard_layout(numels, ranks, align);
}

std::string optimizer_shard_file(int rank, int ranks) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "optimizer.rank%05d-of-%05d.safetensors", rank, ranks);
  return buf;
}

}  // namespace tidal::checkpoint
