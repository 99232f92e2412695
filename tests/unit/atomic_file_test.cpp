// io::write_atomically (Note [Outputs that are not regular files]): a regular file is replaced by a rename, a
// symbolic link keeps being a link and its target gets the bytes, a descriptor path (/proc/self/fd/N) writes to
// that descriptor, a character device or FIFO is written through and never replaced, a directory or block
// device is refused. Every node is private to a temporary directory, never the machine's.
#include "tidal/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/error_of.h"
#include "tidal/train/metrics.h"

namespace tidal::io {
namespace {

namespace fs = std::filesystem;

std::string fresh(const std::string& name) {
  const std::string d = ::testing::TempDir() + "tidal_atomic_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void put(const std::string& path, const std::string& text) {
  write_atomically(path, [&](int fd) { write_all(fd, text.data(), text.size(), path); });
}

std::string contents(const std::string& path) { return read_file(path); }

TEST(AtomicFile, RegularFilesAreReplacedAndNothingIsLeftBehind) {
  const std::string d = fresh("regular");
  put(d + "/a.json", "one");
  put(d + "/a.json", "two");
  EXPECT_EQ(contents(d + "/a.json"), "two");
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 1);  // no temporary left
}

TEST(AtomicFile, ASymbolicLinkStaysALinkAndItsTargetIsWritten) {
  const std::string d = fresh("links");
  fs::create_directories(d + "/real");
  put(d + "/real/out.json", "old");
  fs::create_symlink("real/out.json", d + "/link.json");  // relative to the link's directory
  put(d + "/link.json", "new");
  EXPECT_TRUE(fs::is_symlink(d + "/link.json"));
  EXPECT_EQ(contents(d + "/real/out.json"), "new");
  // A dangling link: the file is made where it points.
  fs::create_symlink(d + "/real/made.json", d + "/dangling.json");
  put(d + "/dangling.json", "made");
  EXPECT_TRUE(fs::is_symlink(d + "/dangling.json"));
  EXPECT_EQ(contents(d + "/real/made.json"), "made");
}

TEST(AtomicFile, ADescriptorPathWritesToTheDescriptor) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  put("/proc/self/fd/" + std::to_string(p[1]), "through the pipe");
  ::close(p[1]);
  char buf[64] = {};
  const ssize_t n = ::read(p[0], buf, sizeof buf - 1);
  ::close(p[0]);
  EXPECT_EQ(std::string(buf, size_t(std::max<ssize_t>(n, 0))), "through the pipe");
  EXPECT_NE(testing::error_of([] { put("/dev/fd/987", "x"); }).find("descriptor 987 is not open"), std::string::npos);
}

TEST(AtomicFile, AFifoIsWrittenThroughAndStaysAFifo) {
  const std::string d = fresh("fifo"), fifo = d + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] {
    std::ifstream in(fifo, std::ios::binary);
    got.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  });
  put(fifo, "streamed");
  reader.join();
  EXPECT_EQ(got, "streamed");
  EXPECT_TRUE(fs::is_fifo(fifo));
}

TEST(AtomicFile, ACharacterDeviceIsWrittenThroughNeverReplaced) {
  const std::string d = fresh("device"), null = d + "/null";
  if (::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) GTEST_SKIP() << "mknod needs root";
  put(null, "discarded");
  struct stat st;
  ASSERT_EQ(::stat(null.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));  // still the device, not a file renamed over it
  EXPECT_EQ(major(st.st_rdev), 1u);
  // And through a link to it.
  fs::create_symlink(null, d + "/to_null");
  put(d + "/to_null", "discarded");
  ASSERT_EQ(::stat(null.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST(AtomicFile, DirectoriesAndBlockDevicesAreRefused) {
  const std::string d = fresh("refused");
  EXPECT_NE(testing::error_of([&] { put(d, "x"); }).find("is a directory: give a file name"), std::string::npos);
  const std::string block = d + "/disk";
  if (::mknod(block.c_str(), S_IFBLK | 0600, makedev(7, 200)) == 0) {
    EXPECT_NE(testing::error_of([&] { put(block, "x"); }).find("is a block device"), std::string::npos);
    struct stat st;
    ASSERT_EQ(::stat(block.c_str(), &st), 0);
    EXPECT_TRUE(S_ISBLK(st.st_mode));
  }
}

// --metrics-json /dev/stdout (or a FIFO): the file is rewritten at every log line, but a stream gets one document,
// the final one, not one per rewrite.
TEST(AtomicFile, MetricsToAStreamAreOneDocument) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  {
    train::MetricsWriter m("/proc/self/fd/" + std::to_string(p[1]), nlohmann::json::object());
    m.add_step({1, 2.0, 1e-3, 1.0, 10.0, 100.0, 0, {}});
    m.write();
    m.write();
    m.write(/*last=*/true);
  }
  ::close(p[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) got.append(buf, size_t(n));
  ::close(p[0]);
  const nlohmann::json j = nlohmann::json::parse(got);  // throws on two documents
  EXPECT_EQ(j["steps"].size(), size_t(1));
  EXPECT_FALSE(replaces_file("/dev/stdout"));
  EXPECT_TRUE(replaces_file(fresh("replaces") + "/new.json"));
}

}  // namespace
}  // namespace tidal::io
