#include "tidal/data/jsonl.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "tidal/base/error.h"

namespace tidal::data {
namespace {

using json = nlohmann::json;

// Lines of a plain or gzip file, each without its newline.
class LineReader {
 public:
  explicit LineReader(const std::string& path) : path_(path), gz_(path.ends_with(".gz")) {
    std::error_code ec;
    const auto st = std::filesystem::status(path, ec);
    TIDAL_CHECK(!ec && std::filesystem::is_regular_file(st), "[data] '", path,
                "' is not a readable regular file (JSON Lines inputs are files)");
    if (gz_) {
      gz_file_ = gzopen(path.c_str(), "rb");
      TIDAL_CHECK(gz_file_ != nullptr, "[data] cannot open '", path, "'");
    } else {
      file_ = std::fopen(path.c_str(), "rb");
      TIDAL_CHECK(file_ != nullptr, "[data] cannot open '", path, "'");
    }
  }
  ~LineReader() {
    if (gz_file_ != nullptr) gzclose(gz_file_);
    if (file_ != nullptr) std::fclose(file_);
  }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line into `line`; false at the end of the file.
  bool next(std::string& line) {
    line.clear();
    for (;;) {
      const size_t nl = pending_.find('\n', scanned_);
      if (nl != std::string::npos) {
        line.assign(pending_, 0, nl);
        pending_.erase(0, nl + 1);
        scanned_ = 0;
        return true;
      }
      scanned_ = pending_.size();
      if (eof_) {  // a last line without its newline
        if (pending_.empty()) return false;
        line.swap(pending_);
        pending_.clear();
        scanned_ = 0;
        return true;
      }
      char buf[1 << 16];
      const int n = gz_ ? gzread(gz_file_, buf, sizeof buf) : int(std::fread(buf, 1, sizeof buf, file_));
      if (gz_ && n <= 0) {  // an error, or the end: a truncated stream ends with Z_BUF_ERROR
        int code = Z_OK;
        const char* what = gzerror(gz_file_, &code);
        TIDAL_CHECK(n == 0 && (code == Z_OK || code == Z_STREAM_END), "[data] '", path_,
                    "' is not a whole gzip stream (", what, "; truncated or corrupt): fix or re-compress the file");
      }
      if (!gz_ && n == 0 && std::ferror(file_)) tidal::detail::throw_error("[data] reading '" + path_ + "' failed");
      if (n <= 0) eof_ = true;
      pending_.append(buf, size_t(std::max(n, 0)));
    }
  }

 private:
  std::string path_;
  bool gz_;
  gzFile gz_file_ = nullptr;
  std::FILE* file_ = nullptr;
  bool eof_ = false;
  std::string pending_;  // read, not yet handed on
  size_t scanned_ = 0;   // pending_'s prefix already known to hold no newline
};

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

// What is wrong with a record ("" when nothing), its values filled in.
std::string record_values(const json& j, const std::vector<std::string>& keys, std::vector<std::string>& out) {
  out.clear();
  for (const std::string& k : keys) {
    auto it = j.find(k);
    if (it == j.end()) return "no key '" + k + "' (--json-keys)";
    if (!it->is_string()) return "'" + k + "' is a JSON " + std::string(it->type_name()) + ", not a string";
    out.push_back(it->get<std::string>());
  }
  return "";
}

}  // namespace

bool is_json_lines(const std::string& path) {
  for (const char* suffix : {".jsonl", ".json", ".jsonl.gz", ".json.gz"})
    if (path.ends_with(suffix)) return true;
  return false;
}

void for_each_json_object(const std::string& path, BadLine policy, JsonlCounts& counts,
                          const std::function<std::string(const json&)>& f) {
  LineReader reader(path);
  std::string line;
  for (int64_t number = 1; reader.next(line); ++number) {
    if (blank(line)) {
      ++counts.blank;
      continue;
    }
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    std::string wrong = j.is_discarded() ? "not valid JSON"
                        : !j.is_object() ? std::string("a JSON ") + j.type_name() + ", not an object"
                                         : f(j);
    if (!wrong.empty()) {
      const std::string where = tidal::detail::str_cat(path, ":", number, ": ", wrong);
      TIDAL_CHECK(policy == BadLine::skip, "[data] ", where, " (--on-bad-line skip skips such lines and counts them)");
      if (counts.bad++ == 0) counts.first_bad = where;
      continue;
    }
    ++counts.records;
  }
}

void for_each_json_record(const std::string& path, const std::vector<std::string>& keys, BadLine policy,
                          JsonlCounts& counts, const std::function<void(std::vector<std::string>&&)>& f) {
  TIDAL_CHECK(!keys.empty(), "[data] no JSON key to read (--json-keys)");
  std::vector<std::string> values;
  for_each_json_object(path, policy, counts, [&](const json& j) {
    std::string wrong = record_values(j, keys, values);
    if (wrong.empty()) f(std::move(values));
    values.clear();
    return wrong;
  });
}

}  // namespace tidal::data
