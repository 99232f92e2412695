#include "tidal/data/corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tidal/base/error.h"

namespace tidal::data {
namespace fs = std::filesystem;
namespace {

bool looks_binary(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  char buf[4096];
  in.read(buf, sizeof buf);
  return std::find(buf, buf + in.gcount(), '\0') != buf + in.gcount();
}

bool blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

}  // namespace

std::vector<std::string> expand_inputs(const std::vector<std::string>& paths) {
  TIDAL_CHECK(!paths.empty(), "[data] no input files given");
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    TIDAL_CHECK(!ec && fs::exists(st), "[data] input '", p, "' does not exist");
    if (!fs::is_directory(st)) {
      files.push_back(p);
      continue;
    }
    std::vector<std::string> found;
    for (const fs::directory_entry& e : fs::directory_iterator(p)) {
      if (e.is_symlink() || !e.is_regular_file() || looks_binary(e.path())) continue;
      found.push_back(e.path().string());
    }
    TIDAL_CHECK(!found.empty(), "[data] directory '", p, "' holds no text file");
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

std::string read_file(const std::string& path) {
  // Read whole, so only a regular file: a device or a FIFO may never end (/dev/zero read until memory was
  // gone).
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  TIDAL_CHECK(ec || !fs::exists(st) || fs::is_regular_file(st), "[data] '", path,
              "' is not a regular file (a device, FIFO or socket): text inputs are read whole; save the text to a "
              "file first");
  std::ifstream in(path, std::ios::binary);
  TIDAL_CHECK(in.good(), "[data] cannot open '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  TIDAL_CHECK(!in.bad(), "[data] reading '", path, "' failed");
  return ss.str();
}

std::vector<std::string_view> split_text(std::string_view text, DocumentSplit split) {
  std::vector<std::string_view> docs;
  auto keep = [&](size_t begin, size_t end) {
    const std::string_view d = text.substr(begin, end - begin);
    if (!blank(d)) docs.push_back(d);
  };
  if (split == DocumentSplit::file) {
    keep(0, text.size());
    return docs;
  }
  size_t doc_begin = 0, line_begin = 0;
  while (line_begin < text.size()) {
    const size_t nl = text.find('\n', line_begin);
    const size_t line_end = nl == std::string_view::npos ? text.size() : nl + 1;
    std::string_view line = text.substr(line_begin, line_end - line_begin);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
    const bool separator = split == DocumentSplit::fortune ? line == "%" : blank(line);
    if (separator) {
      keep(doc_begin, line_begin);
      doc_begin = line_end;
    }
    line_begin = line_end;
  }
  keep(doc_begin, text.size());
  return docs;
}

void for_each_document(const std::vector<std::string>& files, DocumentSplit split,
                       const std::function<void(std::string_view)>& f) {
  for (const std::string& path : files) {
    const std::string text = read_file(path);
    for (std::string_view doc : split_text(text, split)) f(doc);
  }
}

}  // namespace tidal::data
