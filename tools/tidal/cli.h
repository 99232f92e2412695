#pragma once
// Shared pieces of the `tidal` command line: the exit codes, --help, and the commands. Every command parses its
// options with tidal::Flags (tidal/base/flags.h).
#include <string>
#include <vector>

#include "tidal/base/flags.h"

namespace tidal::cli {

enum ExitCode : int { kOk = 0, kError = 1, kUsage = 2, kOutOfMemory = 3 };

// Parses argv into f; when the user asked for help (--help, -h, or "help" alone) prints
// "usage: tidal COMMAND SYNOPSIS" and the options to stdout and returns true: the command then returns kOk.
bool parse_or_help(Flags& f, const std::vector<std::string>& argv, const std::string& synopsis);

int run_demo(const std::vector<std::string>& args);
int run_info(const std::vector<std::string>& args);
int run_presets(const std::vector<std::string>& args);
int run_train(const std::vector<std::string>& args);
int run_generate(const std::vector<std::string>& args);
int run_export(const std::vector<std::string>& args);
int run_report(const std::vector<std::string>& args);
int run_plan(const std::vector<std::string>& args);

}  // namespace tidal::cli
