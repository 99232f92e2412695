#pragma once
// Writing files so that a crash never leaves a half-written file under the final name: write to a
// temporary in the same directory, fsync it, rename over the target, fsync the directory.
#include <functional>
#include <string>

namespace tidal::io {

// Calls write(fd) on a temporary next to `path`, then atomically replaces `path`. On any error the
// temporary is removed, `path` is untouched, and tidal::Error names the file. Only a regular file (or a
// new one) is replaced: a symbolic link's target is written and the link kept; /dev/stdout, /dev/stderr,
// /dev/fd/N and /proc/self/fd/N write to that descriptor; a character device (/dev/null) or a FIFO is
// written through; a directory or a block device is refused.
void write_atomically(const std::string& path, const std::function<void(int fd)>& write);
// Whether write_atomically(path, ...) replaces a regular file (or makes one): false for what it writes
// through (a descriptor path, a character device, a FIFO), which a rewrite would append to instead.
bool replaces_file(const std::string& path);
// Writes all of buf to fd (retrying short writes); throws naming `path` on error.
void write_all(int fd, const void* buf, size_t n, const std::string& path);
// The whole file; throws naming the file when it cannot be read.
std::string read_file(const std::string& path);
// Creates `dir` and its parents (nothing when it exists); throws tidal::Error "<what> <dir>: cannot
// create the directory (...)" otherwise — `what` names where the path came from, e.g. "--save".
void create_directories(const std::string& dir, const std::string& what);

}  // namespace tidal::io
