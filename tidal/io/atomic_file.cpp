#include "tidal/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
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

namespace {

// The descriptor a path names directly: /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N; -1 otherwise.
// Reopening such a path would start a file it redirects to from offset 0 (or replace it): it is written as is.
int inherited_descriptor(const std::string& path) {
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (const char* prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    const std::string p(prefix);
    if (path.size() <= p.size() || path.compare(0, p.size(), p) != 0) continue;
    const std::string n = path.substr(p.size());
    if (n.size() > 6 || n.find_first_not_of("0123456789") != std::string::npos) return -1;
    return std::stoi(n);
  }
  return -1;
}

// Where `path` leads through symbolic links (at most 40), the links' own directories resolving relative
// targets; the last path need not exist (a dangling link: the file is made there).
std::string link_target(std::string path) {
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return path;
    if (inherited_descriptor(path) >= 0) return path;
    std::string target(size_t(st.st_size > 0 ? st.st_size : 4096) + 1, '\0');
    const ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
    TIDAL_CHECK(n >= 0, "[io] cannot read the symbolic link ", path, ": ", errno_text());
    target.resize(size_t(n));
    path = target.starts_with("/") ? target : dir_of(path) + "/" + target;
  }
  TIDAL_CHECK(false, "[io] ", path, ": too many levels of symbolic links");
  return path;
}

// Writes to a file that is not replaced: a stream the process inherited, a character device or a FIFO.
void write_through(int fd, const std::string& path, const std::function<void(int fd)>& write) {
  write(fd);
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS)  // streams and devices have nothing to flush
    TIDAL_CHECK(false, "[io] cannot flush ", path, ": ", errno_text());
}

void replace_atomically(const std::string& path, const std::function<void(int fd)>& write) {
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

}  // namespace

bool replaces_file(const std::string& given) {
  if (inherited_descriptor(given) >= 0) return false;
  struct stat st;
  return ::stat(link_target(given).c_str(), &st) != 0 || S_ISREG(st.st_mode);
}

void write_atomically(const std::string& given, const std::function<void(int fd)>& write) {
  // Note [Outputs that are not regular files]: only a regular file (or a new one) is replaced, by a
  // rename; a symbolic link's target is written and the link kept; a stream, character device or FIFO
  // is written through; a directory or block device is refused.
  if (const int inherited = inherited_descriptor(given); inherited >= 0) {
    TIDAL_CHECK(::fcntl(inherited, F_GETFD) != -1, "[io] ", given, ": descriptor ", inherited, " is not open");
    write_through(inherited, given, write);
    return;
  }
  const std::string path = link_target(given);
  const std::string named = path == given ? given : given + " (-> " + path + ")";
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    TIDAL_CHECK(errno == ENOENT, "[io] cannot write ", named, ": ", errno_text());
    replace_atomically(path, write);
    return;
  }
  TIDAL_CHECK(!S_ISDIR(st.st_mode), "[io] ", named, " is a directory: give a file name");
  TIDAL_CHECK(!S_ISBLK(st.st_mode), "[io] ", named, " is a block device: refusing to write over it; give a file name");
  if (S_ISREG(st.st_mode)) {
    replace_atomically(path, write);
    return;
  }
  // A character device (/dev/null), a FIFO or a socket: written, never replaced.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  TIDAL_CHECK(fd >= 0, "[io] cannot open ", named, " for writing: ", errno_text());
  try {
    write_through(fd, named, write);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
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
