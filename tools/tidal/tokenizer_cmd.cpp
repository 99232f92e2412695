// `tidal tokenizer`: train a byte-level BPE tokenizer on text files, and encode / decode with one.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <new>
#include <optional>
#include <sstream>

#include "tidal/allocator.h"
#include "tidal/base/error.h"
#include "tidal/base/flags.h"
#include "tidal/data/corpus.h"
#include "tidal/data/tokenizer.h"
#include "tidal/memory_stats.h"
#include "tools/tidal/cli.h"
#include "tools/tidal/data_commands.h"

namespace tidal::cli {
namespace {

const char* kHelp =
    "usage: tidal tokenizer <train|encode|decode|info> [options]\n"
    "  train   --input FILE|DIR [FILE ...] --vocab-size N --output tokenizer.json\n"
    "          [--special-tokens '<|endoftext|>,...'] [--min-frequency 2]\n"
    "          [--split-on-fortune-delimiter | --split-on-blank-lines]\n"
    "  encode  --tokenizer tokenizer.json (--text TEXT | --input FILE)   prints the ids\n"
    "  decode  --tokenizer tokenizer.json --ids '1 2 3'                  prints the text\n"
    "  info    --tokenizer tokenizer.json                                 vocabulary facts\n";

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

int train(const std::vector<std::string>& argv) {
  Flags a("tokenizer train");
  add_text_input_flags(a)
      .option("vocab-size", "tokens in the vocabulary, 256 bytes and special tokens included (default 8192)", "N")
      .option("output", "where to write the tokenizer", "tokenizer.json")
      .option("special-tokens", "comma-separated special tokens (default <|endoftext|>)", "LIST")
      .option("min-frequency", "stop merging when no pair occurs this often (default 2)", "N");
  if (parse_or_help(a, argv, "--input FILE|DIR [FILE ...] --vocab-size N --output tokenizer.json [options]"))
    return kOk;
  TIDAL_CHECK(a.has("output"), "tidal tokenizer train: --output tokenizer.json is required");
  data::TrainOptions opt;
  opt.vocab_size = a.integer("vocab-size", 8192, 257, int64_t(1) << 30);
  opt.min_frequency = a.integer("min-frequency", 2, 1, int64_t(1) << 40);
  if (a.has("special-tokens")) opt.special_tokens = split_commas(a.str("special-tokens", ""));
  const std::vector<std::string> files = text_input_files(a, "tokenizer train");
  std::vector<std::string> docs;
  const data::DocumentSplit split = document_split(a, "tokenizer train");
  for (const std::string& file : files)
    naming_oom("reading " + input_named(file),
               [&] { data::for_each_document({file}, split, [&](std::string_view d) { docs.emplace_back(d); }); });
  TIDAL_CHECK(!docs.empty(), "tidal tokenizer train: the inputs hold no text");
  data::TrainStats stats;
  std::optional<data::Tokenizer> trained;
  naming_oom("training on " + std::to_string(files.size()) + " input file(s) from " + input_named(files.front()),
             [&] { trained = data::Tokenizer::train(docs, opt, &stats); });
  const data::Tokenizer& tok = *trained;
  const std::string output = a.str("output", "");
  tok.save(output);
  const auto start = std::chrono::steady_clock::now();
  int64_t tokens = 0;
  for (const auto& ids : tok.encode_batch(std::vector<std::string_view>(docs.begin(), docs.end()), false))
    tokens += int64_t(ids.size());
  const double encode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "trained a %lld-token vocabulary (%lld merges) on %zu files, %zu documents, %.2f MB "
      "(%lld words, %lld distinct) in %.2f s\n",
      (long long)tok.vocab_size(), (long long)stats.merges, files.size(), docs.size(), double(stats.bytes) / 1e6,
      (long long)stats.words, (long long)stats.unique_words, stats.seconds);
  std::printf("on the training text: %lld tokens, %.3f bytes/token (encoded at %.1f MB/s)\n", (long long)tokens,
              double(stats.bytes) / double(std::max<int64_t>(tokens, 1)), double(stats.bytes) / encode_s / 1e6);
  if (stats.merges < opt.vocab_size - 256 - int64_t(opt.special_tokens.size()))
    std::printf("note: stopped early: no pair occurs --min-frequency %lld times any more\n",
                (long long)opt.min_frequency);
  std::printf("wrote %s\n", output.c_str());
  return kOk;
}

data::Tokenizer load(const Flags& a, const char* command) {
  TIDAL_CHECK(a.has("tokenizer"), "tidal tokenizer ", command, ": --tokenizer tokenizer.json is required");
  return data::Tokenizer::load(a.str("tokenizer", ""));
}

int encode(const std::vector<std::string>& argv) {
  Flags a("tokenizer encode");
  a.option("tokenizer", "tokenizer.json", "FILE")
      .option("text", "text to encode", "TEXT")
      .option("input", "a file to encode", "FILE");
  if (parse_or_help(a, argv, "--tokenizer tokenizer.json (--text TEXT | --input FILE)")) return kOk;
  TIDAL_CHECK(a.has("text") != a.has("input"), "tidal tokenizer encode: give one of --text TEXT and --input FILE");
  const data::Tokenizer tok = load(a, "encode");
  const std::string text = a.has("text") ? a.str("text", "") : data::read_file(a.str("input", ""));
  std::string line;
  for (int64_t id : tok.encode(text)) {
    if (!line.empty()) line += ' ';
    line += std::to_string(id);
  }
  std::printf("%s\n", line.c_str());
  return kOk;
}

int decode(const std::vector<std::string>& argv) {
  Flags a("tokenizer decode");
  a.option("tokenizer", "tokenizer.json", "FILE")
      .option("ids", "token ids separated by spaces or commas", "'1 2 3'")
      .flag("skip-special", "leave special tokens out of the text");
  if (parse_or_help(a, argv, "--tokenizer tokenizer.json --ids '1 2 3' [--skip-special]")) return kOk;
  TIDAL_CHECK(a.has("ids"), "tidal tokenizer decode: --ids '1 2 3' is required");
  const data::Tokenizer tok = load(a, "decode");
  std::vector<int64_t> ids;
  std::string ids_text = a.str("ids", "");
  for (char& c : ids_text)
    if (c == ',') c = ' ';
  std::istringstream ss(ids_text);
  std::string word;
  while (ss >> word) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TIDAL_CHECK(used == word.size() && used > 0, "tidal tokenizer decode: --ids must be integers, got '", word, "'");
    ids.push_back(v);
  }
  const std::string text = tok.decode(ids, a.flag_on("skip-special"));
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  return kOk;
}

int info(const std::vector<std::string>& argv) {
  Flags a("tokenizer info");
  a.option("tokenizer", "tokenizer.json", "FILE");
  if (parse_or_help(a, argv, "--tokenizer tokenizer.json")) return kOk;
  const data::Tokenizer tok = load(a, "info");
  std::printf("vocab size: %lld (embedding rows)\nmerges: %lld\n", (long long)tok.vocab_size(),
              (long long)tok.num_merges());
  for (const data::AddedToken& t : tok.added_tokens())
    std::printf("added token %lld: %s%s\n", (long long)t.id, t.content.c_str(), t.special ? " (special)" : "");
  if (auto eod = tok.token_to_id("<|endoftext|>")) std::printf("end of document: %lld\n", (long long)*eod);
  return kOk;
}

}  // namespace

Flags& add_text_input_flags(Flags& f) {
  return f.multi("input", "text files, or directories of them", "FILE|DIR")
      .flag("split-on-fortune-delimiter", "one document per fortune entry (default: one per input file)")
      .flag("split-on-blank-lines", "one document per blank-line separated paragraph")
      .option("max-input-bytes",
              "refuse an input file larger than this (e.g. 10GiB), before reading anything (default: no limit)",
              "BYTES");
}

std::vector<std::string> text_input_files(const Flags& f, const std::string& command) {
  TIDAL_CHECK(f.has("input"), "tidal ", command, ": --input FILE [FILE ...] is required");
  std::vector<std::string> files = data::expand_inputs(f.strs("input"));
  if (f.has("max-input-bytes")) {  // checked for every file before the first is read
    const int64_t cap = parse_bytes(f.str("max-input-bytes"));
    TIDAL_CHECK(cap > 0, "tidal ", command, ": --max-input-bytes must be positive, got '", f.str("max-input-bytes"),
                "'");
    for (const std::string& file : files) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(file, ec);
      TIDAL_CHECK(ec || int64_t(size) <= cap, "tidal ", command, ": ", file, " holds ", format_bytes(int64_t(size)),
                  ", more than --max-input-bytes ", format_bytes(cap), ": split it, or raise the limit");
    }
  }
  return files;
}

void naming_oom(const std::string& doing, const std::function<void()>& work) {
  try {
    work();
  } catch (const std::bad_alloc&) {
    throw OutOfMemory("out of host memory while " + doing +
                          ": the input, or what is built from it, needs more memory than this machine has; split "
                          "it into smaller files (--max-input-bytes refuses large ones up front)",
                      0, MemoryStats{});
  }
}

std::string input_named(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return ec ? path : path + " (" + format_bytes(int64_t(size)) + ")";
}

data::DocumentSplit document_split(const Flags& f, const std::string& command) {
  TIDAL_CHECK(!(f.flag_on("split-on-fortune-delimiter") && f.flag_on("split-on-blank-lines")), "tidal ", command,
              ": choose one of --split-on-fortune-delimiter and --split-on-blank-lines");
  if (f.flag_on("split-on-fortune-delimiter")) return data::DocumentSplit::fortune;
  if (f.flag_on("split-on-blank-lines")) return data::DocumentSplit::blank_lines;
  return data::DocumentSplit::file;
}

int run_tokenizer(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kHelp, args.empty() ? stderr : stdout);
    return args.empty() ? kUsage : kOk;
  }
  const std::string sub = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "train") return train(rest);
  if (sub == "encode") return encode(rest);
  if (sub == "decode") return decode(rest);
  if (sub == "info") return info(rest);
  std::fprintf(stderr, "tidal tokenizer: unknown subcommand '%s'\n%s", sub.c_str(), kHelp);
  return kUsage;
}

}  // namespace tidal::cli
