#include "tidal/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tidal/base/error.h"

namespace tidal::io {
namespace {
std::string errno_text() { return std::strerror(errno); }

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}
}  // namespace

void write_all(int fd, const void* buf, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    TIDAL_CHECK(w > 0, "[io] cannot write ", path, ": ", errno_text());
    p += w;
    n -= size_t(w);
  }
}

void write_atomically(const std::string& path, const std::function<void(int fd)>& write) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TIDAL_CHECK(fd >= 0, "[io] cannot create ", tmp, ": ", errno_text(),
              " (does the directory exist and is it writable?)");
  try {
    write(fd);
    TIDAL_CHECK(::fsync(fd) == 0, "[io] cannot flush ", tmp, ": ", errno_text());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    TIDAL_CHECK(false, "[io] cannot move ", tmp, " to ", path, ": ", why);
  }
  const int dfd = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // the rename itself is durable once the directory is
    ::close(dfd);
  }
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TIDAL_CHECK(f.good(), "[io] cannot open ", path, ": ", errno_text());
  std::ostringstream ss;
  ss << f.rdbuf();
  TIDAL_CHECK(!f.bad(), "[io] cannot read ", path);
  return ss.str();
}

void create_directories(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TIDAL_CHECK(!ec && std::filesystem::is_directory(dir), what, " ", dir, ": cannot create the directory (",
              ec ? ec.message() : "a file is in the way", "); give a writable path");
}

}  // namespace tidal::io
