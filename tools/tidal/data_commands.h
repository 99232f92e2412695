#pragma once
// The data commands of the `tidal` command line: `tidal tokenizer` (train, encode, decode, info) and
// `tidal prepare` (text files to a Megatron indexed dataset).
#include <string>
#include <vector>

namespace tidal::cli {

int run_prepare(const std::vector<std::string>& args);
int run_tokenizer(const std::vector<std::string>& args);

// Takes every "--name v1 v2 ..." out of argv (values run to the next "--" argument; the option may
// repeat) and returns the values, so the rest can go to Args, which knows single values only.
std::vector<std::string> take_list_option(std::vector<std::string>& argv, const std::string& name);

}  // namespace tidal::cli
