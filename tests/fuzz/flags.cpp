// libFuzzer target: the command line of `tidal train` (tidal::Flags and tidal::train::parse_train_args),
// then what `tidal plan` does with the result: the step's memory predicted from the shapes alone (the
// sizes the flags give reach the estimator's arithmetic, and a meta-device model's parameters).
//
// Input: the arguments, separated by NUL or whitespace. scripts/fuzz.sh runs the targets in a scratch
// directory, so a flag naming a relative path can only touch that.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_support.h"
#include "tidal/plan/oom_advice.h"
#include "tidal/train/arguments.h"

namespace {

std::vector<std::string> split_args(const uint8_t* data, size_t size) {
  std::vector<std::string> argv;
  std::string arg;
  for (size_t i = 0; i < size; ++i) {
    const char c = char(data[i]);
    if (c == '\0' || c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (!arg.empty()) argv.push_back(std::move(arg));
      arg.clear();
    } else {
      arg += c;
    }
  }
  if (!arg.empty()) argv.push_back(std::move(arg));
  return argv;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> argv = split_args(data, size);
  tidal::fuzz::expect_clean_errors([&] {
    const tidal::train::TrainArgs args = tidal::train::parse_train_args(argv);
    (void)args.to_json().dump();
    (void)tidal::plan::oom_advice(args.model, tidal::plan::triage_settings(args));
  });
  return 0;
}
