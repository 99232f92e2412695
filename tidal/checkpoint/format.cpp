#include "tidal/checkpoint/format.h"

#include <fcntl.h>
#include <sys/stat.h>
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

SaveLock& SaveLock::operator=(SaveLock&& o) noexcept {
  if (this != &o) {
    this->~SaveLock();
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

SaveLock::~SaveLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // a finished run leaves no lock file (a killed one's is stale: taken over next time)
  ::close(fd_);             // closing releases the lock
  fd_ = -1;
}

void SaveLock::release_without_removing() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

// "PID on HOST": who holds a lock, for the message a second run gets.
std::string holder_of_this_process() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == 0) std::strcpy(host, "?");
  return tidal::detail::str_cat(::getpid(), " on host ", host);
}

// Note [One run per --save]: an exclusive open-file-description lock (fcntl F_OFD_SETLK: released when the
// file is closed or the process ends however it ends; unlike a classic POSIX lock it also excludes a second
// open in the same process, and unlike flock it is a byte-range lock, which NFS carries to other hosts) on
// DIR/.tidal-save.lock, which then holds "PID on HOST". The holder removes the file when it ends, so a run
// that locked the file just before it was removed holds a lock on a name nobody else sees: after locking, the
// file must still be the one at that name, else it starts over with the new one.
SaveLock lock_save_dir(const std::string& dir) {
  const std::string path = dir + "/.tidal-save.lock";
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    TIDAL_CHECK(fd >= 0, "--save ", dir, ": cannot write there (", std::strerror(errno),
                "); give a writable directory");
    SaveLock lock(fd, path);
    struct flock l {};
    l.l_type = F_WRLCK;
    l.l_whence = SEEK_SET;
    if (::fcntl(fd, F_OFD_SETLK, &l) != 0) {
      const int err = errno;
      char text[320] = {0};
      const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
      const std::string holder = n > 0 ? std::string(text, size_t(n)) : std::string("unknown: the file is empty");
      lock.release_without_removing();  // the file is the holder's
      TIDAL_CHECK(err != EACCES && err != EAGAIN, "--save ", dir, " is in use by another tidal train (pid ", holder,
                  ", as its lock file ", path,
                  " says): two runs saving to one directory would destroy each other's "
                  "checkpoints; give this run another --save, or stop the other one");
      tidal::detail::throw_error(
          tidal::detail::str_cat("--save ", dir, ": cannot lock ", path, " (", std::strerror(err), ")"));
    }
    struct stat held {
    }, named{};
    const bool same = ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
                      held.st_ino == named.st_ino;
    if (!same) {
      lock.release_without_removing();  // a finished run removed it under us: lock the file now there
      TIDAL_CHECK(attempt < 100, "--save ", dir, ": ", path, " keeps being replaced while this run locks it");
      continue;
    }
    // Who holds it is a courtesy for the message above; the lock is what protects.
    const std::string me = holder_of_this_process();
    const bool noted = ::ftruncate(fd, 0) == 0 && ::pwrite(fd, me.data(), me.size(), 0) == ssize_t(me.size());
    (void)noted;
    return lock;
  }
}

}  // namespace

PreparedSave prepare_save_dir(const std::string& dir) {
  io::create_directories(dir, "--save");
  PreparedSave prepared;
  prepared.lock = lock_save_dir(dir);
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
  prepared.removed = std::move(removed);
  return prepared;
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
