#pragma once
// TensorBoard event files (--tensorboard-dir): TFRecord framing (length, masked CRC-32C of the length,
// the record, masked CRC-32C of the record) around tensorflow.Event protocol buffers, written by hand:
// a file_version event first, then one event per scalar (wall_time, step, summary.value{tag,
// simple_value}). The file is events.out.tfevents.<seconds>.<host>.<pid>, the name TensorBoard looks for;
// records are appended and flushed, so TensorBoard shows a run while it trains.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace tidal::io {

// CRC-32C (Castagnoli), as TFRecord frames its records; and TFRecord's masked form of it.
uint32_t crc32c(const uint8_t* data, size_t n);
uint32_t masked_crc32c(const uint8_t* data, size_t n);

class EventWriter {
 public:
  // Creates `dir` if missing and a new event file in it; throws tidal::Error naming the path otherwise.
  explicit EventWriter(const std::string& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // One scalar at `step` (a tag may repeat at later steps: TensorBoard plots it against them).
  void scalar(std::string_view tag, int64_t step, double value);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void record(const std::vector<uint8_t>& event);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace tidal::io
