#pragma once
// The disk tier of activation offload: one anonymous spill file (unlinked as soon as it is opened, so
// nothing is left on disk when the process ends, however it ends), regions allocated first-fit, and
// file I/O of the bounded staging buffers the offloader copies device memory through.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace tidal::memory {

class SpillFile {
 public:
  explicit SpillFile(const std::string& dir);
  // A spill file that only counts (a dry run's, on the meta device): regions as a real one allocates
  // them, no file made, nothing read or written.
  static std::unique_ptr<SpillFile> counted();
  ~SpillFile();
  SpillFile(const SpillFile&) = delete;
  SpillFile& operator=(const SpillFile&) = delete;

  int64_t allocate(int64_t bytes);  // an offset; thread-safe
  void release(int64_t offset);
  // File I/O of host memory (the offloader's staging buffers); throws tidal::Error naming the
  // directory on an I/O error. Safe to call from several threads on disjoint regions.
  void write(int64_t offset, const void* src, int64_t bytes);
  void read(int64_t offset, void* dst, int64_t bytes);
  int64_t size() const;

 private:
  SpillFile() = default;
  std::string dir_;
  int fd_ = -1;  // -1: counted()
  mutable std::mutex mu_;
  std::map<int64_t, int64_t> used_;       // offset -> bytes
  std::multimap<int64_t, int64_t> free_;  // bytes -> offset
  int64_t end_ = 0;
};

}  // namespace tidal::memory
