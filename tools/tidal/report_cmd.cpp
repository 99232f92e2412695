// `tidal report DIR`: the summary of a profile written by `tidal train --profile DIR`.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tidal/base/error.h"
#include "tidal/base/json.h"
#include "tidal/io/atomic_file.h"
#include "tidal/profile/summary_report.h"
#include "tools/tidal/cli.h"

namespace tidal::cli {
namespace {

using json = nlohmann::json;

}  // namespace

int run_report(const std::vector<std::string>& argv) {
  if (argv.size() != 1 || argv[0] == "--help" || argv[0] == "-h") {
    std::fprintf(argv.size() == 1 ? stdout : stderr,
                 "usage: tidal report DIR   (DIR: written by 'tidal train --profile DIR')\n");
    return argv.size() == 1 ? kOk : kUsage;
  }
  const std::string dir = argv[0];
  const std::string path = dir + "/summary.json";
  TIDAL_CHECK(std::filesystem::exists(path), "tidal report: ", dir,
              " holds no profile (no summary.json); write one "
              "with 'tidal train --profile ",
              dir, "'");
  const std::string text = profile::report_of_summary(parse_json(io::read_file(path), "tidal report: " + path), path);
  std::fputs(text.c_str(), stdout);
  std::printf(
      "\nfiles in %s: trace.json (open in https://ui.perfetto.dev or chrome://tracing), memory_timeline.csv, "
      "memory_report.md, memory.svg, timeline.svg\n",
      dir.c_str());
  return kOk;
}

}  // namespace tidal::cli
