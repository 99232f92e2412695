#pragma once
// What every libFuzzer target of tests/fuzz shares (docs/reliability.md, Fuzzing): a scratch directory per process
// for the APIs that only read files, and the rule of the targets — a tidal::Error is the expected
// outcome of a bad input; an InternalError (a bug by its own definition), any other exception, a crash,
// a sanitizer report, a leak, a timeout or running out of the RSS limit is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "tidal/base/error.h"

namespace tidal::fuzz {

// $TMPDIR (else /dev/shm, else /tmp)/tidal-fuzz-XXXXXX, made on first use and removed at exit.
inline const std::string& scratch_dir() {
  struct Dir {
    std::string path;
    Dir() {
      const char* tmp = std::getenv("TMPDIR");
      std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "/dev/shm";
      if (!std::filesystem::is_directory(base)) base = "/tmp";
      std::string pattern = base + "/tidal-fuzz-XXXXXX";
      if (::mkdtemp(pattern.data()) == nullptr) {
        std::perror("tidal fuzz: mkdtemp");
        std::abort();
      }
      path = pattern;
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

// Writes `size` bytes to `path` (replacing it).
inline void write_bytes(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  if (!f) {
    std::fprintf(stderr, "tidal fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

// The scratch file `name` holding the input (the same file for every input of the process).
inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  write_bytes(path, data, size);
  return path;
}

// Runs `fn`; a tidal::Error is the expected way to refuse the input. An InternalError aborts, so the
// fuzzer records the input; other exceptions escape (std::terminate: the fuzzer records them too).
template <class Fn>
void expect_clean_errors(Fn&& fn) {
  try {
    fn();
  } catch (const InternalError& e) {
    std::fprintf(stderr, "tidal fuzz: InternalError (a bug): %s\n", e.what());
    std::abort();
  } catch (const Error&) {
  }
}

}  // namespace tidal::fuzz
