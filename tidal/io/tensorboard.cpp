#include "tidal/io/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "tidal/base/error.h"
#include "tidal/io/atomic_file.h"

namespace tidal::io {
namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // Castagnoli, reflected
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrc32c = make_crc32c_table();

// Protocol-buffer encoding: a varint, a field's key, fixed-width little-endian numbers.
void varint(std::vector<uint8_t>& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(uint8_t(v | 0x80));
    v >>= 7;
  }
  out.push_back(uint8_t(v));
}
void key(std::vector<uint8_t>& out, int field, int wire) { varint(out, uint64_t(field) << 3 | uint64_t(wire)); }
// Appends n bytes (resize + memcpy: GCC 12's -Wstringop-overflow misreads vector::insert of a small array
// under -O1 sanitizer builds).
void append(std::vector<uint8_t>& out, const void* data, size_t n) {
  if (n == 0) return;
  const size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, data, n);
}
template <typename T>
void fixed(std::vector<uint8_t>& out, T v) {
  append(out, &v, sizeof(T));  // x86-64 and aarch64: little-endian, as protobuf's fixed types
}
void bytes_field(std::vector<uint8_t>& out, int field, const void* data, size_t n) {
  key(out, field, 2);
  varint(out, n);
  append(out, data, n);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event fields (tensorflow/core/util/event.proto): wall_time 1 (double), step 2 (int64), file_version 3
// (string), summary 5 (Summary: value 1 (Value: tag 1 (string), simple_value 2 (float))).
std::vector<uint8_t> event_header(int64_t step) {
  std::vector<uint8_t> e;
  key(e, 1, 1);
  fixed(e, now_seconds());
  if (step != 0) {
    key(e, 2, 0);
    varint(e, uint64_t(step));
  }
  return e;
}

}  // namespace

uint32_t crc32c(const uint8_t* data, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = kCrc32c[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const uint8_t* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

EventWriter::EventWriter(const std::string& dir) {
  create_directories(dir, "--tensorboard-dir");
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = dir + "/events.out.tfevents." + std::to_string(int64_t(now_seconds())) + "." + host + "." +
          std::to_string(::getpid());
  file_ = std::fopen(path_.c_str(), "wb");
  TIDAL_CHECK(file_ != nullptr, "[tensorboard] cannot create '", path_, "': ", std::strerror(errno));
  std::vector<uint8_t> e = event_header(0);
  const char version[] = "brain.Event:2";
  bytes_field(e, 3, version, sizeof version - 1);
  record(e);
  flush();
}

EventWriter::~EventWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventWriter::scalar(std::string_view tag, int64_t step, double value) {
  std::vector<uint8_t> v;  // Summary.Value
  bytes_field(v, 1, tag.data(), tag.size());
  key(v, 2, 5);
  fixed(v, float(value));
  std::vector<uint8_t> summary;
  bytes_field(summary, 1, v.data(), v.size());
  std::vector<uint8_t> e = event_header(step);
  bytes_field(e, 5, summary.data(), summary.size());
  record(e);
}

void EventWriter::record(const std::vector<uint8_t>& event) {
  std::vector<uint8_t> r;
  fixed(r, uint64_t(event.size()));
  fixed(r, masked_crc32c(r.data(), 8));
  append(r, event.data(), event.size());
  fixed(r, masked_crc32c(event.data(), event.size()));
  TIDAL_CHECK(std::fwrite(r.data(), 1, r.size(), file_) == r.size(), "[tensorboard] writing '", path_,
              "' failed: ", std::strerror(errno), " (is the disk full?)");
}

void EventWriter::flush() {
  TIDAL_CHECK(std::fflush(file_) == 0, "[tensorboard] writing '", path_, "' failed: ", std::strerror(errno));
}

}  // namespace tidal::io
