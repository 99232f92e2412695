// TensorBoard event files (io/tensorboard.h), read back here by an independent decoder: every record's
// TFRecord framing (length, masked CRC-32C of the length and of the record) and the Event fields — the
// file version first, then each scalar's wall time, step, tag and value. (TensorBoard 2.21's
// EventAccumulator reads the files tidal train writes: docs/training.md.)
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/support/error_of.h"
#include "tidal/io/tensorboard.h"
#include "tidal/train/arguments.h"

namespace tidal::io {
namespace {

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version, tag;
  float value = 0;
};

uint64_t varint(const std::string& b, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const uint8_t c = uint8_t(b.at(at++));
    v |= uint64_t(c & 0x7F) << shift;
    if (!(c & 0x80)) return v;
  }
}

template <typename T>
T fixed(const std::string& b, size_t& at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof(T));
  at += sizeof(T);
  return v;
}

// The fields of one Event message (and of its summary's first value).
Event decode(const std::string& b) {
  Event e;
  size_t at = 0;
  while (at < b.size()) {
    const uint64_t key = varint(b, at);
    const int field = int(key >> 3), wire = int(key & 7);
    if (field == 1 && wire == 1)
      e.wall_time = fixed<double>(b, at);
    else if (field == 2 && wire == 0)
      e.step = int64_t(varint(b, at));
    else if (wire == 2) {
      const uint64_t n = varint(b, at);
      const std::string body = b.substr(at, n);
      at += n;
      if (field == 3) e.file_version = body;
      if (field == 5) {  // Summary { Value value = 1 { tag = 1, simple_value = 2 } }
        size_t s = 0;
        EXPECT_EQ(varint(body, s), uint64_t(1 << 3 | 2));
        const uint64_t vn = varint(body, s);
        const std::string v = body.substr(s, vn);
        size_t p = 0;
        EXPECT_EQ(varint(v, p), uint64_t(1 << 3 | 2));
        const uint64_t tn = varint(v, p);
        e.tag = v.substr(p, tn);
        p += tn;
        EXPECT_EQ(varint(v, p), uint64_t(2 << 3 | 5));
        e.value = fixed<float>(v, p);
      }
    } else {
      ADD_FAILURE() << "unexpected field " << field << " wire " << wire;
      break;
    }
  }
  return e;
}

std::vector<Event> read_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Event> out;
  size_t at = 0;
  while (at < b.size()) {
    const auto* p = reinterpret_cast<const uint8_t*>(b.data() + at);
    const uint64_t n = fixed<uint64_t>(b, at);
    EXPECT_EQ(fixed<uint32_t>(b, at), masked_crc32c(p, 8)) << "length CRC of record " << out.size();
    const std::string data = b.substr(at, n);
    at += n;
    EXPECT_EQ(fixed<uint32_t>(b, at), masked_crc32c(reinterpret_cast<const uint8_t*>(data.data()), data.size()))
        << "data CRC of record " << out.size();
    out.push_back(decode(data));
  }
  return out;
}

TEST(Tensorboard, Crc32cIsCastagnolis) {
  const char* check = "123456789";  // the CRC catalogue's check value of CRC-32C
  EXPECT_EQ(crc32c(reinterpret_cast<const uint8_t*>(check), 9), 0xE3069283u);
}

TEST(Tensorboard, EventsReadBackFramedAndInOrder) {
  const std::string dir = ::testing::TempDir() + "tidal_tb_test/new";
  std::filesystem::remove_all(::testing::TempDir() + "tidal_tb_test");
  std::string path;
  {
    EventWriter w(dir);  // made with its parents
    path = w.path();
    EXPECT_NE(path.find("/events.out.tfevents."), std::string::npos) << path;
    w.scalar("lm loss", 1, 6.5);
    w.scalar("lm loss vs samples", 300, 6.5);
    w.scalar("learning-rate", 2, 1.5e-4);
    w.flush();
  }
  const std::vector<Event> ev = read_events(path);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  EXPECT_GT(ev[0].wall_time, 1.7e9);  // seconds since 1970, now
  EXPECT_EQ(ev[1].tag, "lm loss");
  EXPECT_EQ(ev[1].step, 1);
  EXPECT_EQ(ev[1].value, 6.5f);
  EXPECT_EQ(ev[2].step, 300);
  EXPECT_EQ(ev[3].tag, "learning-rate");
  EXPECT_EQ(ev[3].value, 1.5e-4f);
  EXPECT_GE(ev[3].wall_time, ev[1].wall_time);
  std::filesystem::remove_all(::testing::TempDir() + "tidal_tb_test");
}

TEST(Tensorboard, FlagsNeedTheDirectory) {
  auto error = [](std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"--mock-data"});
    return testing::error_of([&] { train::parse_train_args(argv); });
  };
  for (const char* flag :
       {"--log-memory-to-tensorboard", "--log-timers-to-tensorboard", "--log-validation-ppl-to-tensorboard"})
    EXPECT_NE(error({flag}).find(std::string(flag) + " needs --tensorboard-dir DIR"), std::string::npos) << flag;
  EXPECT_NE(error({"--tensorboard-log-interval", "2"}).find("needs --tensorboard-dir"), std::string::npos);
  const train::TrainArgs a = train::parse_train_args(
      {"--mock-data", "--tensorboard-dir", "tb", "--tensorboard-log-interval", "5", "--log-memory-to-tensorboard"});
  EXPECT_EQ(a.tensorboard.dir, "tb");
  EXPECT_EQ(a.tensorboard.log_interval, 5);
  EXPECT_TRUE(a.tensorboard.memory && !a.tensorboard.timers && !a.tensorboard.validation_ppl);
}

}  // namespace
}  // namespace tidal::io
