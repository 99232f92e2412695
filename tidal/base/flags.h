#pragma once
// The one command-line parser of every `tidal` command (chosen over CLI11: docs/architecture.md, "Command line").
// Megatron-LM style: "--name value" (or "--name=value") options, "--name v1 v2 ..." lists and "--name" switches,
// declared once with their help text. Unknown flags are rejected with the closest valid name and the list of all of
// them; values are parsed with range checks. "--help" / "-h" anywhere sets help_requested().
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tidal {

class Flags {
 public:
  explicit Flags(std::string command) : command_(std::move(command)) {}

  // Declarations (before parse).
  Flags& option(const std::string& name, const std::string& help, const std::string& value_name = "VALUE");
  // Takes one or more values, up to the next "--" argument; may repeat ("--input a --input b c": a, b, c).
  Flags& multi(const std::string& name, const std::string& help, const std::string& value_name = "VALUE");
  Flags& flag(const std::string& name, const std::string& help);

  // Parses argv; throws tidal::Error on an unknown flag, a missing value or a repeated flag.
  void parse(const std::vector<std::string>& argv);
  bool help_requested() const { return help_requested_; }

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  bool declares(const std::string& name) const;
  bool flag_on(const std::string& name) const;
  std::string str(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> strs(const std::string& name) const;
  int64_t integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const;
  double number(const std::string& name, double fallback, double lo, double hi) const;
  // The names that were given, in order.
  const std::vector<std::string>& given() const { return given_; }
  // Removes a parsed flag and returns its values: a command that shares another's table (tidal plan,
  // tidal train's flags) takes what it reads itself before handing the rest on.
  std::vector<std::string> take(const std::string& name);

  std::string help() const;  // "  --name VALUE   help" lines
  // "usage: tidal COMMAND SYNOPSIS\n\n" + help(): what a command prints for --help.
  std::string usage(const std::string& synopsis) const;

 private:
  struct Spec {
    std::string help, value_name;
    enum Kind { option, multi, flag } kind;
  };
  const std::vector<std::string>& values(const std::string& name) const;
  std::string command_;
  std::vector<std::pair<std::string, Spec>> specs_;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> given_;
  bool help_requested_ = false;
};

}  // namespace tidal
