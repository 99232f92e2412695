#pragma once
// Shared pieces of the `tidal` command line: argument parsing with clear errors, and the exit codes.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tidal::cli {

enum ExitCode : int { kOk = 0, kError = 1, kUsage = 2, kOutOfMemory = 3 };

// "--name value" and "--flag" arguments. Unknown names are rejected with the list of valid ones.
class Args {
 public:
  // `flags` take no value; `options` take one. Throws tidal::Error on anything else.
  Args(const std::vector<std::string>& argv, const std::vector<std::string>& flags,
       const std::vector<std::string>& options, const std::string& command);
  bool flag(const std::string& name) const { return flags_.count(name) > 0; }
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string str(const std::string& name, const std::string& fallback) const;
  int64_t integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const;
  double number(const std::string& name, double fallback, double lo, double hi) const;

 private:
  std::string command_;
  std::map<std::string, bool> flags_;
  std::map<std::string, std::string> values_;
};

int run_demo(const std::vector<std::string>& args);
int run_info(const std::vector<std::string>& args);
int run_presets(const std::vector<std::string>& args);
int run_train(const std::vector<std::string>& args);
int run_generate(const std::vector<std::string>& args);
int run_report(const std::vector<std::string>& args);
int run_plan(const std::vector<std::string>& args);

}  // namespace tidal::cli
