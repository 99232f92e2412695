#pragma once
// The memory flags of `tidal train` (and `tidal plan`): --recompute-*, --activation-offload and
// --offload-*, --loss-compute-mode and --loss-chunk-size, --swap-optimizer[-times]. They are declared
// here, parsed and validated once into a memory::MemoryConfig (errors name the flag the user typed),
// and turned back into flags by the inverse next to the parser, which the out-of-memory advice and
// `tidal plan` print: parse_memory_config(memory_config_flags(c), model) == c for every valid c.
#include <string>
#include <vector>

#include "tidal/base/flags.h"
#include "tidal/memory/memory_config.h"
#include "tidal/models/config.h"

namespace tidal::train {

// Declares the memory flags (with their help) on `f`.
Flags& add_memory_flags(Flags& f);

// Reads the memory flags of a parsed `f`, validating them against the model. Throws tidal::Error.
memory::MemoryConfig parse_memory_config(const Flags& f, const models::ModelConfig& model);
// The same from a command line of memory flags only.
memory::MemoryConfig parse_memory_config(const std::vector<std::string>& argv, const models::ModelConfig& model);

// Checks a configuration made as a value (tidal plan's candidates) as the flags that spell it are
// checked, and sets its recompute plan: parse_memory_config(memory_config_flags(c), model) without the
// words. Throws tidal::Error naming the flag.
void validate_memory_config(memory::MemoryConfig& c, const models::ModelConfig& model);

// The flags that give `c`, one argv word each; defaults are left out, except that an offload policy
// and a loss chunk size are always spelled out.
std::vector<std::string> memory_config_flags(const memory::MemoryConfig& c);
// The words as one line for people to read and copy ("--a b --c"); a word with a space is quoted.
std::string join_flags(const std::vector<std::string>& words);

}  // namespace tidal::train
