// libFuzzer target: a profile's summary.json as `tidal report DIR` reads it (tidal::profile::report_of_summary):
// its fields checked, then formatted. A document that is not a tidal profile summary must end in a clean error.
//
// Input: the file's text.
#include <string>

#include "tests/fuzz/fuzz_support.h"
#include "tidal/base/json.h"
#include "tidal/profile/summary_report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tidal::fuzz::expect_clean_errors(
      [&] { (void)tidal::profile::report_of_summary(tidal::parse_json(text, "[fuzz] summary.json"), "summary.json"); });
  return 0;
}
