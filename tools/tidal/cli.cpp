#include "tools/tidal/cli.h"

#include <cstdio>

namespace tidal::cli {

bool parse_or_help(Flags& f, const std::vector<std::string>& argv, const std::string& synopsis) {
  const bool help_word = argv.size() == 1 && argv[0] == "help";
  if (!help_word) f.parse(argv);
  if (!help_word && !f.help_requested()) return false;
  std::fputs(f.usage(synopsis).c_str(), stdout);
  return true;
}

}  // namespace tidal::cli
