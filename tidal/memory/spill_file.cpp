#include "tidal/memory/spill_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tidal/base/error.h"

namespace tidal::memory {
namespace {

// Fault injection for tests: with TIDAL_OFFLOAD_FAULT=write (read) every write (read) of the spill
// file fails with the error a full disk (an unreadable file) gives.
bool injected(const char* kind) {
  const char* env = std::getenv("TIDAL_OFFLOAD_FAULT");
  return env != nullptr && std::strcmp(env, kind) == 0;
}

}  // namespace

SpillFile::SpillFile(const std::string& dir) : dir_(dir) {
  TIDAL_CHECK(!dir.empty(), "[offload] the disk tier needs a directory (--offload-dir PATH)");
  std::string path = dir + "/tidal-spill-XXXXXX";
  fd_ = ::mkstemp(path.data());
  TIDAL_CHECK(fd_ >= 0, "[offload] cannot create a spill file in ", dir, ": ", std::strerror(errno),
              " (does the directory exist and is it writable?)");
  ::unlink(path.c_str());  // anonymous from now on: removed when the process ends
}

std::unique_ptr<SpillFile> SpillFile::counted() { return std::unique_ptr<SpillFile>(new SpillFile()); }

SpillFile::~SpillFile() {
  if (fd_ >= 0) ::close(fd_);
}

int64_t SpillFile::allocate(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = free_.lower_bound(bytes);
  int64_t offset;
  if (it != free_.end()) {
    offset = it->second;
    const int64_t have = it->first;
    free_.erase(it);
    if (have > bytes) free_.emplace(have - bytes, offset + bytes);
  } else {
    offset = end_;
    end_ += bytes;
  }
  used_[offset] = bytes;
  return offset;
}

void SpillFile::release(int64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = used_.find(offset);
  if (it == used_.end()) return;
  free_.emplace(it->second, offset);
  used_.erase(it);
  if (used_.empty()) {  // nothing in flight: start over at the beginning of the file
    free_.clear();
    end_ = 0;
  }
}

int64_t SpillFile::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return end_;
}

void SpillFile::write(int64_t offset, const void* src, int64_t bytes) {
  if (fd_ < 0) return;  // counted()
  const char* p = static_cast<const char*>(src);
  for (int64_t written = 0; written < bytes;) {
    ssize_t w = injected("write") ? (errno = ENOSPC, -1)
                                  : ::pwrite(fd_, p + written, size_t(bytes - written), off_t(offset + written));
    if (w < 0 && errno == EINTR) continue;
    TIDAL_CHECK(w > 0, "[offload] cannot write ", bytes - written,
                " bytes of offloaded activations to the spill file in ", dir_, ": ", std::strerror(errno),
                "; free space there, or use --offload-target host");
    written += w;
  }
}

void SpillFile::read(int64_t offset, void* dst, int64_t bytes) {
  if (fd_ < 0) return;  // counted()
  char* p = static_cast<char*>(dst);
  for (int64_t got = 0; got < bytes;) {
    ssize_t r = injected("read") ? (errno = EIO, -1) : ::pread(fd_, p + got, size_t(bytes - got), off_t(offset + got));
    if (r < 0 && errno == EINTR) continue;
    TIDAL_CHECK(r > 0, "[offload] cannot read back offloaded activations from the spill file in ", dir_, ": ",
                r == 0 ? std::string("the file is shorter than what was written") : std::strerror(errno),
                "; the step cannot continue (its activations are lost)");
    got += r;
  }
}

}  // namespace tidal::memory
