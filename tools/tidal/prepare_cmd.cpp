// `tidal prepare`: tokenize text files into a Megatron indexed dataset (PREFIX.bin / PREFIX.idx), one
// document per file, blank-line paragraph or fortune entry.
#include <chrono>
#include <cstdio>

#include "tidal/base/error.h"
#include "tidal/base/flags.h"
#include "tidal/data/corpus.h"
#include "tidal/data/indexed_dataset.h"
#include "tidal/data/tokenizer.h"
#include "tools/tidal/cli.h"
#include "tools/tidal/data_commands.h"

namespace tidal::cli {

int run_prepare(const std::vector<std::string>& argv) {
  Flags a("prepare");
  add_text_input_flags(a)
      .option("tokenizer", "tokenizer.json (Hugging Face format)", "FILE")
      .option("output-prefix", "writes PREFIX.bin and PREFIX.idx (Megatron's MMapIndexedDataset)", "PREFIX")
      .option("dtype", "token type: uint16, int32, ... (default: the smallest that holds the vocabulary)", "TYPE")
      .flag("append-eod", "end each document with <|endoftext|>");
  if (parse_or_help(a, argv,
                    "--input FILE|DIR [FILE ...] --tokenizer tokenizer.json --output-prefix PREFIX "
                    "[options]"))
    return kOk;
  TIDAL_CHECK(a.has("tokenizer"), "tidal prepare: --tokenizer tokenizer.json is required");
  TIDAL_CHECK(a.has("output-prefix"), "tidal prepare: --output-prefix PREFIX is required");
  const data::DocumentSplit split = document_split(a, "prepare");
  const std::vector<std::string> files = text_input_files(a, "prepare");
  const data::Tokenizer tok = data::Tokenizer::load(a.str("tokenizer", ""));
  const bool eod = a.flag_on("append-eod");
  const int64_t eod_id = eod ? tok.eod_id() : -1;
  const data::TokenDType dtype =
      a.has("dtype") ? data::parse_token_dtype(a.str("dtype", "")) : data::optimal_token_dtype(tok.vocab_size());
  const std::string prefix = a.str("output-prefix", "");

  const auto start = std::chrono::steady_clock::now();
  data::IndexedDatasetWriter writer(prefix, dtype);
  int64_t bytes = 0;
  // Documents are encoded in parallel (Tokenizer::encode_batch), about 32 MB of text at a time.
  std::vector<std::vector<int64_t>> ids;
  for (const std::string& path : files) {
    const std::string text = data::read_file(path);
    const std::vector<std::string_view> docs = data::split_text(text, split);
    for (size_t first = 0; first < docs.size();) {
      size_t last = first, batch_bytes = 0;
      while (last < docs.size() && (last == first || batch_bytes < (size_t(32) << 20)))
        batch_bytes += docs[last++].size();
      ids = tok.encode_batch(std::vector<std::string_view>(docs.begin() + long(first), docs.begin() + long(last)));
      for (std::vector<int64_t>& doc_ids : ids) {
        if (eod) doc_ids.push_back(eod_id);
        writer.add_document(doc_ids);
      }
      bytes += int64_t(batch_bytes);
      first = last;
    }
  }
  TIDAL_CHECK(writer.num_documents() > 0, "tidal prepare: the inputs hold no document (only empty text?)");
  writer.finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu files -> %lld documents, %lld tokens (%s), %.2f MB of text, %.3f bytes/token\n", files.size(),
              (long long)writer.num_documents(), (long long)writer.num_tokens(), data::token_dtype_name(dtype),
              double(bytes) / 1e6, double(bytes) / double(std::max<int64_t>(writer.num_tokens(), 1)));
  std::printf("%.2f s, %.1f MB/s; wrote %s.bin and %s.idx\n", seconds, double(bytes) / 1e6 / seconds, prefix.c_str(),
              prefix.c_str());
  return kOk;
}

}  // namespace tidal::cli
