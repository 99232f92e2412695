// `tidal report DIR`: the summary of a profile written by `tidal train --profile DIR`.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tidal/base/error.h"
#include "tidal/io/atomic_file.h"
#include "tidal/profile/analysis.h"
#include "tools/tidal/cli.h"

namespace tidal::cli {

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
  nlohmann::json summary;
  try {
    summary = nlohmann::json::parse(io::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    TIDAL_CHECK(false, "tidal report: ", path, " is not valid JSON (", e.what(), ")");
  }
  TIDAL_CHECK(summary.value("version", 0) == 1, "tidal report: ", path, " is not a tidal profile summary (version ",
              summary.value("version", 0), ")");
  std::fputs(profile::format_summary(summary).c_str(), stdout);
  std::printf(
      "\nfiles in %s: trace.json (open in https://ui.perfetto.dev or chrome://tracing), memory_timeline.csv, "
      "memory_report.md, memory.svg, timeline.svg\n",
      dir.c_str());
  return kOk;
}

}  // namespace tidal::cli
