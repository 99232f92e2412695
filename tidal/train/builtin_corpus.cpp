#include "tidal/train/builtin_corpus.h"

#include <cstdlib>
#include <filesystem>

#include "tidal/base/error.h"
#include "tidal/data/corpus.h"
#include "tidal/data/indexed_dataset.h"
#include "tidal/data/tokenizer.h"
#include "tidal/io/atomic_file.h"

namespace tidal::train {
namespace {
namespace fs = std::filesystem;
}

std::string cache_dir() {
  if (const char* d = std::getenv("TIDAL_CACHE_DIR"); d != nullptr && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d != nullptr && *d) return std::string(d) + "/tidal";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h) return std::string(h) + "/.cache/tidal";
  return ".tidal-cache";
}

std::vector<std::string> read_fortunes(const std::string& dir) {
  TIDAL_CHECK(fs::is_directory(dir), "the built-in corpus needs Debian's fortunes package (", dir,
              " is missing): run scripts/setup.sh, or apt-get install fortunes; or train on your own data with ",
              "--data-path and --tokenizer (see docs/training.md)");
  std::vector<std::string> fortunes;
  data::for_each_document(data::expand_inputs({dir}), data::DocumentSplit::fortune,
                          [&](std::string_view doc) { fortunes.emplace_back(doc); });
  TIDAL_CHECK(!fortunes.empty(), "no fortunes found in ", dir);
  return fortunes;
}

PreparedCorpus prepare_builtin_corpus(int64_t vocab_size, const std::string& dir) {
  PreparedCorpus c;
  const std::string base = dir + "/fortunes-v1-bpe" + std::to_string(vocab_size);  // v1: corpus.h splitting
  c.tokenizer_path = base + "/tokenizer.json";
  c.data_prefix = base + "/fortunes";
  if (fs::exists(c.tokenizer_path) && fs::exists(c.data_prefix + ".bin") && fs::exists(c.data_prefix + ".idx")) {
    data::IndexedDataset d(c.data_prefix);
    c.documents = d.num_documents();
    c.tokens = d.num_tokens();
    c.reused = true;
    return c;
  }
  std::error_code ec;
  fs::create_directories(base, ec);
  TIDAL_CHECK(!ec, "cannot create the cache directory ", base, ": ", ec.message(),
              " (set TIDAL_CACHE_DIR to a writable directory)");
  const std::vector<std::string> fortunes = read_fortunes();
  data::TrainOptions opt;
  opt.vocab_size = vocab_size;
  const data::Tokenizer tok = data::Tokenizer::train(fortunes, opt);
  tok.save(c.tokenizer_path);
  data::IndexedDatasetWriter w(c.data_prefix, data::optimal_token_dtype(tok.vocab_size()));
  for (const std::string& f : fortunes) {
    std::vector<int64_t> ids = tok.encode(f);
    ids.push_back(tok.eod_id());
    w.add_document(ids);
  }
  w.finish();
  c.documents = w.num_documents();
  c.tokens = w.num_tokens();
  return c;
}

}  // namespace tidal::train
