#pragma once
// Reading training text: input paths (files or directories) and how a file splits into documents.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tidal::data {

enum class DocumentSplit {
  file,         // the whole file is one document
  blank_lines,  // paragraphs separated by blank (or whitespace-only) lines
  fortune,      // entries separated by lines holding only "%" (the fortune(6) format)
};

// Files and directories to files: a directory gives its regular files, sorted by name, skipping
// symbolic links and binary files (a NUL byte in the first 4 KiB, like fortune's .dat indexes).
// Throws tidal::Error for a path that does not exist or a directory with no text file.
std::vector<std::string> expand_inputs(const std::vector<std::string>& paths);

std::string read_file(const std::string& path);

// The documents of `text` (views into it). Separator lines are dropped, and so are documents that
// are empty or only whitespace; each document keeps its lines' newlines.
std::vector<std::string_view> split_text(std::string_view text, DocumentSplit split);

// Reads each file and calls f(document) for its documents in order.
void for_each_document(const std::vector<std::string>& files, DocumentSplit split,
                       const std::function<void(std::string_view)>& f);

}  // namespace tidal::data
