#pragma once
// Runs a shell command line as a user would and captures its exit code and output (stdout + stderr).
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace tidal::testing {

struct CommandResult {
  int code = -1;
  std::string output;  // stdout and stderr
};

inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace tidal::testing
