#include "tidal/data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "tidal/base/checked_math.h"
#include "tidal/base/error.h"

namespace tidal::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

bool valid_code(uint8_t c) { return c >= 1 && c <= 8; }

template <typename T>
void put(std::string& out, T v) {  // little-endian on every machine we build for (x86-64, aarch64)
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
T get(const std::string& in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

template <typename T>
void convert(const uint8_t* src, int64_t count, int64_t* out) {
  for (int64_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, src + i * int64_t(sizeof(T)), sizeof v);
    if constexpr (std::is_floating_point_v<T>) {
      // A float token from a file may be NaN or past int64: -1, which the embedding refuses as out of
      // range, instead of an undefined conversion.
      out[i] = v >= T(0) && v < T(9.2e18) ? int64_t(v) : -1;
    } else {
      out[i] = int64_t(v);
    }
  }
}

template <typename T>
bool store(int64_t v, char* dst) {
  if constexpr (std::is_integral_v<T>) {
    if (v < int64_t(std::numeric_limits<T>::min()) || v > int64_t(std::numeric_limits<T>::max())) return false;
  }
  const T t = T(v);
  std::memcpy(dst, &t, sizeof t);
  return true;
}

// The whole .idx file.
std::string read_index_file(const std::string& idx_path) {
  std::string idx;
  std::error_code ec;
  TIDAL_CHECK(std::filesystem::is_regular_file(idx_path, ec), "[indexed dataset] '", idx_path,
              "' is not a file (give --data-path the prefix of a .bin/.idx pair)");
  std::ifstream in(idx_path, std::ios::binary | std::ios::ate);
  TIDAL_CHECK(in.good(), "[indexed dataset] cannot open '", idx_path, "': ", std::strerror(errno));
  const std::streamoff bytes = in.tellg();
  TIDAL_CHECK(bytes >= 0, "[indexed dataset] cannot read the size of '", idx_path, "'");
  idx.resize(size_t(bytes));
  in.seekg(0);
  in.read(idx.data(), std::streamsize(idx.size()));
  TIDAL_CHECK(in.good() || idx.empty(), "[indexed dataset] reading '", idx_path, "' failed");
  return idx;
}

}  // namespace

int64_t token_dtype_size(TokenDType t) {
  switch (t) {
    case TokenDType::u8:
    case TokenDType::i8: return 1;
    case TokenDType::i16:
    case TokenDType::u16: return 2;
    case TokenDType::i32:
    case TokenDType::f32: return 4;
    case TokenDType::i64:
    case TokenDType::f64: return 8;
  }
  return 0;
}

const char* token_dtype_name(TokenDType t) {
  switch (t) {
    case TokenDType::u8: return "uint8";
    case TokenDType::i8: return "int8";
    case TokenDType::i16: return "int16";
    case TokenDType::i32: return "int32";
    case TokenDType::i64: return "int64";
    case TokenDType::f64: return "float64";
    case TokenDType::f32: return "float32";
    case TokenDType::u16: return "uint16";
  }
  return "?";
}

TokenDType parse_token_dtype(const std::string& name) {
  for (uint8_t c = 1; c <= 8; ++c)
    if (name == token_dtype_name(TokenDType(c))) return TokenDType(c);
  TIDAL_CHECK(false, "[indexed dataset] unknown dtype '", name, "'; use uint8, int8, int16, uint16, int32 or int64");
  return TokenDType::u16;
}

TokenDType optimal_token_dtype(int64_t vocab_size) { return vocab_size < 65500 ? TokenDType::u16 : TokenDType::i32; }

// ---------------------------------------------------------------- writer

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, TokenDType dtype)
    : prefix_(std::move(prefix)), dtype_(dtype) {
  TIDAL_CHECK(valid_code(uint8_t(dtype)), "[indexed dataset] bad dtype code ", int(dtype));
  // A prefix, not a folder: "out/" would write the hidden files out/.bin and out/.idx.
  std::error_code ec;
  TIDAL_CHECK(!prefix_.empty() && prefix_.back() != '/' && !std::filesystem::is_directory(prefix_, ec),
              "[indexed dataset] the output prefix '", prefix_, "' names a directory: give a file prefix such as '",
              (std::filesystem::path(prefix_.empty() ? "." : prefix_) / "corpus").string(), "' (writes ",
              "its .bin and .idx files)");
  const std::string tmp = prefix_ + ".bin.tmp";
  bin_ = std::fopen(tmp.c_str(), "wb");
  TIDAL_CHECK(bin_ != nullptr, "[indexed dataset] cannot write '", tmp, "': ", std::strerror(errno));
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (bin_ != nullptr) std::fclose(bin_);
  if (!finished_) {
    std::remove((prefix_ + ".bin.tmp").c_str());
    std::remove((prefix_ + ".idx.tmp").c_str());
  }
}

void IndexedDatasetWriter::add_sequence(const int64_t* tokens, int64_t n) {
  TIDAL_CHECK(!finished_, "[indexed dataset] add_sequence after finish() on '", prefix_, "'");
  TIDAL_CHECK(n >= 0 && n <= std::numeric_limits<int32_t>::max(), "[indexed dataset] a sequence of ", n,
              " tokens does not fit the int32 sizes of the index; split the document");
  const int64_t item = token_dtype_size(dtype_);
  buffer_.resize(size_t(n * item));
  for (int64_t i = 0; i < n; ++i) {
    char* dst = buffer_.data() + i * item;
    bool ok = true;
    switch (dtype_) {
      case TokenDType::u8: ok = store<uint8_t>(tokens[i], dst); break;
      case TokenDType::i8: ok = store<int8_t>(tokens[i], dst); break;
      case TokenDType::i16: ok = store<int16_t>(tokens[i], dst); break;
      case TokenDType::u16: ok = store<uint16_t>(tokens[i], dst); break;
      case TokenDType::i32: ok = store<int32_t>(tokens[i], dst); break;
      case TokenDType::i64: ok = store<int64_t>(tokens[i], dst); break;
      case TokenDType::f32: ok = store<float>(tokens[i], dst); break;
      case TokenDType::f64: ok = store<double>(tokens[i], dst); break;
    }
    TIDAL_CHECK(ok, "[indexed dataset] token ", tokens[i], " does not fit ", token_dtype_name(dtype_), " in '", prefix_,
                ".bin'; use a wider dtype (int32)");
  }
  TIDAL_CHECK(std::fwrite(buffer_.data(), 1, buffer_.size(), bin_) == buffer_.size(), "[indexed dataset] writing '",
              prefix_, ".bin.tmp' failed: ", std::strerror(errno));
  sizes_.push_back(int32_t(n));
  tokens_ += n;
}

void IndexedDatasetWriter::end_document() { doc_idx_.push_back(int64_t(sizes_.size())); }

void IndexedDatasetWriter::finish() {
  TIDAL_CHECK(!finished_, "[indexed dataset] finish() called twice on '", prefix_, "'");
  const std::string bin_tmp = prefix_ + ".bin.tmp", idx_tmp = prefix_ + ".idx.tmp";
  const bool closed = std::fclose(bin_) == 0;
  bin_ = nullptr;
  TIDAL_CHECK(closed, "[indexed dataset] writing '", bin_tmp, "' failed: ", std::strerror(errno));

  std::string idx;
  idx.append(kMagic, sizeof kMagic);
  put<uint64_t>(idx, 1);
  put<uint8_t>(idx, uint8_t(dtype_));
  put<uint64_t>(idx, sizes_.size());
  put<uint64_t>(idx, doc_idx_.size());
  for (int32_t s : sizes_) put<int32_t>(idx, s);
  int64_t pointer = 0;
  for (int32_t s : sizes_) {
    put<int64_t>(idx, pointer);
    pointer += int64_t(s) * token_dtype_size(dtype_);
  }
  for (int64_t d : doc_idx_) put<int64_t>(idx, d);
  {
    std::ofstream out(idx_tmp, std::ios::binary | std::ios::trunc);
    TIDAL_CHECK(out.good(), "[indexed dataset] cannot write '", idx_tmp, "'");
    out.write(idx.data(), std::streamsize(idx.size()));
    out.flush();
    TIDAL_CHECK(out.good(), "[indexed dataset] writing '", idx_tmp, "' failed (disk full?)");
  }
  TIDAL_CHECK(std::rename(bin_tmp.c_str(), (prefix_ + ".bin").c_str()) == 0, "[indexed dataset] cannot rename '",
              bin_tmp, "': ", std::strerror(errno));
  TIDAL_CHECK(std::rename(idx_tmp.c_str(), (prefix_ + ".idx").c_str()) == 0, "[indexed dataset] cannot rename '",
              idx_tmp, "': ", std::strerror(errno));
  finished_ = true;
}

// ---------------------------------------------------------------- reader

IndexedDataset::IndexedDataset(std::string prefix) : prefix_(std::move(prefix)) {
  const std::string idx_path = prefix_ + ".idx", bin_path = prefix_ + ".bin";
  const int64_t bin_bytes = read_index(read_index_file(idx_path), "[indexed dataset] '" + idx_path + "': ");
  map_bin(bin_path, idx_path, bin_bytes);
}

int64_t IndexedDataset::read_index(const std::string& idx, const std::string& where) {
  TIDAL_CHECK(idx.size() >= kHeaderBytes, where, "truncated: ", idx.size(), " bytes, the header alone is ",
              kHeaderBytes);
  TIDAL_CHECK(std::memcmp(idx.data(), kMagic, sizeof kMagic) == 0, where,
              "bad magic: not a Megatron MMapIndexedDataset index (expected \"MMIDIDX\\x00\\x00\")");
  const uint64_t version = get<uint64_t>(idx, 9);
  TIDAL_CHECK(version == 1, where, "version ", version, ", only version 1 is supported");
  const uint8_t code = get<uint8_t>(idx, 17);
  TIDAL_CHECK(valid_code(code), where, "unknown dtype code ", int(code),
              " (Megatron's codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)");
  dtype_ = TokenDType(code);
  const uint64_t n = get<uint64_t>(idx, 18), d = get<uint64_t>(idx, 26);
  const uint64_t body = idx.size() - kHeaderBytes;
  TIDAL_CHECK(n <= body / 12 && d <= body / 8 && kHeaderBytes + 12 * n + 8 * d <= idx.size(), where, "truncated: ", n,
              " sequences and ", d, " document indices need ", kHeaderBytes, " + 12 * ", n, " + 8 * ", d,
              " bytes, the file has ", idx.size());
  const uint64_t expected = kHeaderBytes + 12 * n + 8 * d;
  TIDAL_CHECK(idx.size() == expected || idx.size() == expected + n, where, idx.size() - expected,
              " unexpected bytes after the document index (sizes and counts disagree)");
  TIDAL_CHECK(d >= 1, where, "document count is 0; the document index must at least hold its leading 0");

  sizes_.resize(n);
  pointers_.resize(n);
  doc_idx_.resize(d);
  if (n > 0) {  // an empty dataset's vectors have no storage: memcpy must not see their null data()
    std::memcpy(sizes_.data(), idx.data() + kHeaderBytes, 4 * n);
    std::memcpy(pointers_.data(), idx.data() + kHeaderBytes + 4 * n, 8 * n);
  }
  std::memcpy(doc_idx_.data(), idx.data() + kHeaderBytes + 12 * n, 8 * d);

  // Sequences are back to back from byte 0: each pointer is the sum of the sizes before it (so the
  // pointers only grow), checked for overflow; that the sum is .bin's size is checked below.
  const int64_t item = token_dtype_size(dtype_);
  int64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    TIDAL_CHECK(sizes_[i] >= 0, where, "sequence ", i, " has a negative size ", sizes_[i]);
    TIDAL_CHECK(pointers_[i] == offset, where, "sequence ", i, " starts at byte ", pointers_[i],
                " but the sizes before ", "it put it at ", offset, " (sizes and pointers disagree)");
    offset = checked_add(offset, int64_t(sizes_[i]) * item, where + "the sizes of the sequences");
  }
  num_tokens_ = offset / item;
  TIDAL_CHECK(doc_idx_[0] == 0, where, "the document index starts at ", doc_idx_[0], ", not 0");
  for (size_t k = 1; k < d; ++k)
    TIDAL_CHECK(doc_idx_[k] >= doc_idx_[k - 1] && doc_idx_[k] <= int64_t(n), where, "document index ", k, " is ",
                doc_idx_[k], ": not within [", doc_idx_[k - 1], ", ", n, "]");
  return offset;
}

void IndexedDataset::map_bin(const std::string& bin_path, const std::string& idx_path, int64_t offset) {
  const int fd = ::open(bin_path.c_str(), O_RDONLY);
  TIDAL_CHECK(fd >= 0, "[indexed dataset] cannot open '", bin_path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    TIDAL_CHECK(false, "[indexed dataset] '", bin_path, "' is not a regular file");
  }
  bin_bytes_ = size_t(st.st_size);
  if (bin_bytes_ != size_t(offset)) {
    ::close(fd);
    TIDAL_CHECK(false, "[indexed dataset] '", bin_path, "' has ", bin_bytes_, " bytes but '", idx_path, "' describes ",
                num_tokens_, " ", token_dtype_name(dtype_), " tokens = ", offset,
                " bytes (a truncated file, or .bin and .idx of different datasets)");
  }
  if (bin_bytes_ > 0) {
    void* p = ::mmap(nullptr, bin_bytes_, PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);
    TIDAL_CHECK(p != MAP_FAILED, "[indexed dataset] cannot memory-map '", bin_path, "': ", std::strerror(err));
    bin_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
}

IndexedDataset::~IndexedDataset() {
  if (bin_ != nullptr) ::munmap(const_cast<uint8_t*>(bin_), bin_bytes_);
}

int64_t IndexedDataset::sequence_length(int64_t i) const {
  TIDAL_CHECK(i >= 0 && i < num_sequences(), "[indexed dataset] sequence ", i, " out of range [0, ", num_sequences(),
              ") in '", prefix_, "'");
  return sizes_[size_t(i)];
}

int64_t IndexedDataset::sequence_offset(int64_t i) const {
  sequence_length(i);  // range check
  return pointers_[size_t(i)] / token_dtype_size(dtype_);
}

std::vector<int64_t> IndexedDataset::sequence(int64_t i) const {
  std::vector<int64_t> out(size_t(sequence_length(i)));
  read_tokens(sequence_offset(i), int64_t(out.size()), out.data());
  return out;
}

int64_t IndexedDataset::document_begin(int64_t d) const {
  TIDAL_CHECK(d >= 0 && d <= num_documents(), "[indexed dataset] document ", d, " out of range [0, ", num_documents(),
              "] in '", prefix_, "'");
  return doc_idx_[size_t(d)];
}

int64_t IndexedDataset::document_token_offset(int64_t d) const {
  const int64_t s = document_begin(d);
  return s < num_sequences() ? sequence_offset(s) : num_tokens_;
}

std::vector<int64_t> IndexedDataset::document(int64_t d) const {
  TIDAL_CHECK(d >= 0 && d < num_documents(), "[indexed dataset] document ", d, " out of range [0, ", num_documents(),
              ") in '", prefix_, "'");
  const int64_t first = document_token_offset(d), end = document_token_offset(d + 1);
  std::vector<int64_t> out(size_t(end - first));
  read_tokens(first, end - first, out.data());
  return out;
}

void IndexedDataset::read_tokens(int64_t first, int64_t count, int64_t* out) const {
  TIDAL_CHECK(first >= 0 && count >= 0 && first <= num_tokens_ && count <= num_tokens_ - first, "[indexed dataset] ",
              count, " tokens from token ", first, " are out of range [0, ", num_tokens_, ") in '", prefix_, ".bin'");
  const uint8_t* src = bin_ + first * token_dtype_size(dtype_);
  switch (dtype_) {
    case TokenDType::u8: convert<uint8_t>(src, count, out); break;
    case TokenDType::i8: convert<int8_t>(src, count, out); break;
    case TokenDType::i16: convert<int16_t>(src, count, out); break;
    case TokenDType::u16: convert<uint16_t>(src, count, out); break;
    case TokenDType::i32: convert<int32_t>(src, count, out); break;
    case TokenDType::i64: convert<int64_t>(src, count, out); break;
    case TokenDType::f32: convert<float>(src, count, out); break;
    case TokenDType::f64: convert<double>(src, count, out); break;
  }
}

}  // namespace tidal::data
