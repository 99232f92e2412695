// libFuzzer target: a device profile file (`tidal plan --device FILE`, `--device-profile`): parse_device_profile
// (which checks every field's range), then the profile written back, parsed again to the same text, and its table.
//
// Input: the file's text.
#include <cstdlib>
#include <string>

#include "tests/fuzz/fuzz_support.h"
#include "tidal/plan/device_profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tidal::fuzz::expect_clean_errors([&] {
    const tidal::plan::DeviceProfile p = tidal::plan::parse_device_profile(text, "[fuzz] device profile");
    const std::string written = tidal::plan::device_profile_json(p);
    const tidal::plan::DeviceProfile again = tidal::plan::parse_device_profile(written, "[fuzz] written back");
    if (tidal::plan::device_profile_json(again) != written) std::abort();  // a profile survives its own file
    (void)tidal::plan::format_device_profile(p);
  });
  return 0;
}
