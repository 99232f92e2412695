// Device names (device.h) and tidal train's --device (train/arguments.h): what parses, what each
// device prints as, and the errors that name the valid choices. No GPU needed.
#include <gtest/gtest.h>

#include "tests/support/error_of.h"
#include "tidal/device.h"
#include "tidal/train/arguments.h"

namespace tidal {
namespace {

using testing::error_of;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Device, ParsesCudaAndItsIndex) {
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:0"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::parse("cuda:63"), Device::cuda(63));
  EXPECT_TRUE(Device::parse("cuda:3").is_cuda());
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
}

TEST(Device, PrintsItsName) {
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_EQ(Device::meta().str(), "meta");
  EXPECT_EQ(Device::cuda().str(), "cuda:0");
  EXPECT_EQ(Device::cuda(3).str(), "cuda:3");
  EXPECT_EQ(Device::parse(Device::cuda(7).str()), Device::cuda(7));
}

TEST(Device, BadNamesNameTheValidChoices) {
  for (const char* bad : {"cuda:x", "cuda:", "cuda:-1", "cuda:1x", "gpu", "CUDA", "cuda:1234"}) {
    const std::string e = error_of([&] { Device::parse(bad); });
    EXPECT_TRUE(has(e, "valid choices are cpu, meta, cuda and cuda:N")) << bad << ": " << e;
  }
  const std::string e = error_of([] { Device::parse("cuda:99"); });
  EXPECT_TRUE(has(e, "cuda:N takes N from 0 to 63")) << e;
}

TEST(TrainDevice, DefaultsToTheCpuAndParsesOnce) {
  const std::vector<std::string> base = {"--model", "tiny-gpt2", "--mock-data"};
  EXPECT_EQ(train::parse_train_args(base).device, Device::cpu());
  std::vector<std::string> flags = base;
  flags.insert(flags.end(), {"--device", "cuda:2"});
  const train::TrainArgs a = train::parse_train_args(flags);
  EXPECT_EQ(a.device, Device::cuda(2));
  EXPECT_EQ(a.to_json()["device"], "cuda:2");
  flags = base;
  flags.insert(flags.end(), {"--device", "cuda"});
  EXPECT_EQ(train::parse_train_args(flags).device, Device::cuda(0));
  flags = base;
  flags.insert(flags.end(), {"--device", "cpu"});
  EXPECT_EQ(train::parse_train_args(flags).device, Device::cpu());
}

TEST(TrainDevice, BadDevicesNameTheFlag) {
  std::vector<std::string> flags = {"--model", "tiny-gpt2", "--mock-data", "--device", "cuda:x"};
  std::string e = error_of([&] { train::parse_train_args(flags); });
  EXPECT_TRUE(has(e, "tidal train: --device") && has(e, "valid choices")) << e;
  flags.back() = "cuda:99";
  e = error_of([&] { train::parse_train_args(flags); });
  EXPECT_TRUE(has(e, "tidal train: --device") && has(e, "0 to 63")) << e;
  flags.back() = "meta";
  e = error_of([&] { train::parse_train_args(flags); });
  EXPECT_TRUE(has(e, "--device meta") && has(e, "tidal plan --dry-run")) << e;
}

TEST(TrainDevice, PlanKeepsItsDeviceProfileFlag) {
  // tidal plan declares --device itself (a device profile): tidal train's table for plan leaves it out.
  EXPECT_TRUE(has(train::train_flags().help(), "--device cpu|cuda|cuda:N"));
  EXPECT_FALSE(has(train::train_flags("plan").help(), "\n  --device "));  // its own line, not a mention
}

}  // namespace
}  // namespace tidal
