// `tidal prepare`: tokenize text files into a Megatron indexed dataset (PREFIX.bin / PREFIX.idx), one
// document per file, blank-line paragraph or fortune entry; or JSON Lines files (.jsonl, .json, .gz) into one
// dataset per --json-keys key, PREFIX_KEY_document.bin / .idx as Megatron's preprocess_data.py names them.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string_view>

#include "tidal/base/error.h"
#include "tidal/base/flags.h"
#include "tidal/data/corpus.h"
#include "tidal/data/indexed_dataset.h"
#include "tidal/data/jsonl.h"
#include "tidal/data/tokenizer.h"
#include "tools/tidal/cli.h"
#include "tools/tidal/data_commands.h"
#include "tools/tidal/prepare_progress.h"

namespace tidal::cli {
namespace {

// What both input kinds write with: the tokenizer, the end-of-document id (-1: no --append-eod), the token
// dtype and the output prefix.
struct Output {
  data::Tokenizer tok;
  int64_t eod_id;
  data::TokenDType dtype;
  std::string prefix;
};

Output output_of(const Flags& a) {
  data::Tokenizer tok = data::Tokenizer::load(a.str("tokenizer", ""));
  const int64_t eod_id = a.flag_on("append-eod") ? tok.eod_id() : -1;
  const data::TokenDType dtype =
      a.has("dtype") ? data::parse_token_dtype(a.str("dtype", "")) : data::optimal_token_dtype(tok.vocab_size());
  return Output{std::move(tok), eod_id, dtype, a.str("output-prefix", "")};
}

// One dataset per key: its writer and the documents waiting to be encoded (about 32 MB of text at a time).
struct KeyDataset {
  std::string key, prefix;
  std::unique_ptr<data::IndexedDatasetWriter> writer;
  std::vector<std::string> pending;
  size_t pending_bytes = 0;
  int64_t empty = 0;  // records whose string under the key is empty
};

int prepare_json_lines(const Flags& a, const std::vector<std::string>& files, data::DocumentSplit split) {
  TIDAL_CHECK(split == data::DocumentSplit::file, "tidal prepare: --split-on-* is for plain text: a JSON Lines ",
              "record is one document of each key");
  const std::vector<std::string> keys = a.has("json-keys") ? a.strs("json-keys") : std::vector<std::string>{"text"};
  for (size_t i = 0; i < keys.size(); ++i) {
    TIDAL_CHECK(!keys[i].empty(), "tidal prepare: --json-keys has an empty key");
    for (size_t j = 0; j < i; ++j)
      TIDAL_CHECK(keys[i] != keys[j], "tidal prepare: --json-keys names '", keys[i], "' twice");
  }
  const std::string policy = a.str("on-bad-line", "fail");
  TIDAL_CHECK(policy == "fail" || policy == "skip", "tidal prepare: --on-bad-line must be fail or skip, got '", policy,
              "'");
  const Output out = output_of(a);
  const auto& [tok, eod_id, dtype, prefix] = out;
  const bool eod = eod_id >= 0;
  std::vector<KeyDataset> sets(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    sets[i].key = keys[i];
    sets[i].prefix = prefix + "_" + keys[i] + "_document";  // Megatron's {output_prefix}_{key}_{level}
    sets[i].writer = std::make_unique<data::IndexedDatasetWriter>(sets[i].prefix, dtype);
  }
  data::JsonlCounts counts;
  PrepareProgress progress("records", log_interval(a), 0);
  int64_t tokenized = 0;  // bytes of text encoded so far
  auto flush = [&](KeyDataset& d) {
    std::vector<std::string_view> docs(d.pending.begin(), d.pending.end());
    for (std::vector<int64_t>& ids : tok.encode_batch(docs)) {  // in parallel
      if (eod) ids.push_back(eod_id);
      d.writer->add_document(ids);
    }
    tokenized += int64_t(d.pending_bytes);
    d.pending.clear();
    d.pending_bytes = 0;
    progress.update(counts.records, tokenized);
  };
  const auto start = std::chrono::steady_clock::now();
  int64_t bytes = 0;
  const data::BadLine bad = policy == "skip" ? data::BadLine::skip : data::BadLine::fail;
  for (const std::string& path : files)
    naming_oom("tokenizing " + input_named(path), [&] {
      data::for_each_json_record(path, keys, bad, counts, [&](std::vector<std::string>&& values) {
        for (size_t i = 0; i < sets.size(); ++i) {
          KeyDataset& d = sets[i];
          if (values[i].find_first_not_of(" \t\r\n") == std::string::npos) {
            ++d.empty;  // no document (Megatron's would be empty too)
            continue;
          }
          bytes += int64_t(values[i].size());
          d.pending_bytes += values[i].size();
          d.pending.push_back(std::move(values[i]));
          if (d.pending_bytes >= (size_t(32) << 20)) flush(d);
        }
      });
    });
  progress.clear();
  for (KeyDataset& d : sets) {
    flush(d);
    TIDAL_CHECK(d.writer->num_documents() > 0, "tidal prepare: no record of the inputs has text under '", d.key, "' (",
                counts.records, " records read)");
  }
  for (KeyDataset& d : sets) d.writer->finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu files -> %lld records", files.size(), (long long)counts.records);
  if (counts.bad > 0)
    std::printf(", %lld malformed lines skipped (the first: %s)", (long long)counts.bad, counts.first_bad.c_str());
  if (counts.blank > 0) std::printf(", %lld blank lines", (long long)counts.blank);
  std::printf("; %.2f MB of text in %.2f s, %.1f MB/s\n", double(bytes) / 1e6, seconds, double(bytes) / 1e6 / seconds);
  for (const KeyDataset& d : sets) {
    std::printf("  %s: %lld documents, %lld tokens (%s)", d.key.c_str(), (long long)d.writer->num_documents(),
                (long long)d.writer->num_tokens(), data::token_dtype_name(dtype));
    if (d.empty > 0) std::printf(", %lld records with an empty string left out", (long long)d.empty);
    std::printf("; wrote %s.bin and %s.idx\n", d.prefix.c_str(), d.prefix.c_str());
  }
  return kOk;
}

}  // namespace

int run_prepare(const std::vector<std::string>& argv) {
  Flags a("prepare");
  add_text_input_flags(a)
      .option("tokenizer", "tokenizer.json (Hugging Face format)", "FILE")
      .option("output-prefix", "writes PREFIX.bin and PREFIX.idx (Megatron's MMapIndexedDataset)", "PREFIX")
      .option("dtype", "token type: uint16, int32, ... (default: the smallest that holds the vocabulary)", "TYPE")
      .flag("append-eod", "end each document with <|endoftext|>")
      .option("log-interval",
              "print a progress line every N documents or records (a terminal shows a redrawn one anyway)", "N")
      .multi("json-keys", "JSON Lines inputs: the keys whose strings are documents, one dataset each (default: text)",
             "KEY")
      .option("on-bad-line",
              "JSON Lines inputs: a line that is not an object with a string under every key "
              "stops the run (fail, the default) or is skipped and counted (skip)",
              "fail|skip")
      .option("handler-name",
              "instruction data (MindSpeed-LLM's handlers): AlpacaStyleInstructionHandler or "
              "SharegptStyleInstructionHandler; writes PREFIX_packed_{input_ids,attention_mask,labels}_document",
              "NAME")
      .option("map-keys",
              "instruction data: the record's keys, as a JSON object of MindSpeed's column names "
              "('{\"prompt\":\"instruction\",\"query\":\"input\",\"response\":\"output\"}')",
              "JSON")
      .option("prompt-type",
              "instruction data: the chat template (qwen, llama3, chatml, mistral, gemma, deepseek3, "
              "alpaca, empty)",
              "TYPE")
      .option("prompt-type-path",
              "instruction data: a JSON file of chat templates in MindSpeed-LLM's templates.json format; "
              "--prompt-type names one of them instead of a built-in template",
              "FILE")
      .flag("pack", "instruction data: pack whole samples into sequences of --seq-length tokens")
      .flag("neat-pack",
            "with --pack: the attention mask holds each token's sample in its pack (1, 2, ...; 0 for padding), which "
            "tidal train --neat-pack uses to keep the samples apart (MindSpeed-LLM's neat packing)")
      .option("seq-length",
              "instruction data: with --pack the packed length; without, samples of this many tokens or more are "
              "dropped (MindSpeed's rule)",
              "N");
  if (parse_or_help(a, argv,
                    "--input FILE|DIR [FILE ...] --tokenizer tokenizer.json --output-prefix PREFIX "
                    "[options]"))
    return kOk;
  TIDAL_CHECK(a.has("tokenizer"), "tidal prepare: --tokenizer tokenizer.json is required");
  TIDAL_CHECK(a.has("output-prefix"), "tidal prepare: --output-prefix PREFIX is required");
  const data::DocumentSplit split = document_split(a, "prepare");
  const std::vector<std::string> files = text_input_files(a, "prepare");
  if (a.has("handler-name")) {
    TIDAL_CHECK(split == data::DocumentSplit::file, "tidal prepare: --split-on-* is for plain text, not ",
                "instruction data");
    return prepare_instruction(a, files);
  }
  for (const char* only : {"map-keys", "prompt-type", "prompt-type-path", "pack", "neat-pack", "seq-length"})
    TIDAL_CHECK(!a.has(only), "tidal prepare: --", only, " is for instruction data (with --handler-name)");
  size_t json_files = 0;
  for (const std::string& f : files) json_files += data::is_json_lines(f) ? 1 : 0;
  TIDAL_CHECK(json_files == 0 || json_files == files.size(), "tidal prepare: the inputs mix JSON Lines (", json_files,
              " of ", files.size(), " files) and plain text: prepare them in two runs");
  TIDAL_CHECK(json_files > 0 || (!a.has("json-keys") && !a.has("on-bad-line")), "tidal prepare: --",
              a.has("json-keys") ? "json-keys" : "on-bad-line", " is for JSON Lines inputs (.jsonl, .json, .gz)");
  if (json_files > 0) return prepare_json_lines(a, files, split);
  const Output out = output_of(a);
  const auto& [tok, eod_id, dtype, prefix] = out;
  const bool eod = eod_id >= 0;

  const auto start = std::chrono::steady_clock::now();
  data::IndexedDatasetWriter writer(prefix, dtype);
  int64_t bytes = 0;
  PrepareProgress progress("documents", log_interval(a), input_bytes(files));
  // Documents are encoded in parallel (Tokenizer::encode_batch), about 32 MB of text at a time.
  std::vector<std::vector<int64_t>> ids;
  for (const std::string& path : files)
    naming_oom("tokenizing " + input_named(path), [&] {
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
        progress.update(writer.num_documents(), bytes);
      }
    });
  progress.clear();
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
