#pragma once
// The main job's built-in corpus: the text of Debian's `fortunes` package (installed by
// scripts/setup.sh), one document per fortune. The first run trains a byte-level BPE tokenizer on it
// and tokenizes it into a Megatron indexed dataset under the cache directory; later runs reuse them.
#include <cstdint>
#include <string>
#include <vector>

namespace tidal::train {

struct PreparedCorpus {
  std::string data_prefix;     // PREFIX.bin / PREFIX.idx
  std::string tokenizer_path;  // tokenizer.json
  int64_t documents = 0, tokens = 0;
  bool reused = false;  // found in the cache
};

// Where prepared data is kept: $TIDAL_CACHE_DIR, else $XDG_CACHE_HOME/tidal, else ~/.cache/tidal.
std::string cache_dir();
// The fortunes (one string each) of every fortune file in `dir`; throws telling how to install them.
std::vector<std::string> read_fortunes(const std::string& dir = "/usr/share/games/fortunes");
// Tokenizer and dataset for the built-in corpus with a vocabulary of `vocab_size`.
PreparedCorpus prepare_builtin_corpus(int64_t vocab_size, const std::string& dir = cache_dir());

}  // namespace tidal::train
