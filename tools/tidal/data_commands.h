#pragma once
// The data commands of the `tidal` command line: `tidal tokenizer` (train, encode, decode, info) and
// `tidal prepare` (text files to a Megatron indexed dataset, instruction data to MindSpeed-LLM's packed datasets).
#include <functional>
#include <string>
#include <vector>

#include "tidal/base/flags.h"
#include "tidal/data/corpus.h"

namespace tidal::cli {

int run_prepare(const std::vector<std::string>& args);
int run_tokenizer(const std::vector<std::string>& args);
// `tidal prepare --handler-name ...` (prepare_instruction.cpp): instruction data, its flags parsed from `f`.
int prepare_instruction(const Flags& f, const std::vector<std::string>& files);

// The text inputs of `tokenizer train` and `prepare`: --input FILE|DIR [FILE ...] and how the files split into
// documents, --split-on-fortune-delimiter or --split-on-blank-lines (default: one document per file). Read back:
// the files (directories expanded; at least one --input is required) and the split; `command` names the command in
// the errors.
Flags& add_text_input_flags(Flags& f);
std::vector<std::string> text_input_files(const Flags& f, const std::string& command);
data::DocumentSplit document_split(const Flags& f, const std::string& command);

// Runs `work`; host memory running out in it (std::bad_alloc) becomes the out-of-memory error (exit 3) naming
// what it was doing: "out of host memory while tokenizing data/big.txt (57.22 MiB): ..." (main() puts the command
// before it).
void naming_oom(const std::string& doing, const std::function<void()>& work);
// "PATH (SIZE)" of an input file, for naming_oom.
std::string input_named(const std::string& path);

}  // namespace tidal::cli
