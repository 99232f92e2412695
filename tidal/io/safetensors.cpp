#include "tidal/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>

#include "tidal/base/checked_math.h"
#include "tidal/base/json.h"
#include "tidal/io/atomic_file.h"
#include "tidal/io/shown_name.h"
#include "tidal/memory_scope.h"

namespace tidal::io {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const char* st_dtype(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f64: return "F64";
    case DType::i64: return "I64";
    case DType::i32: return "I32";
    case DType::u8: return "U8";
  }
  return "?";
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int e = -1;
      uint32_t m = mant;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400u) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | (m & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// A tensor's entry in the header, checked.
struct Entry {
  std::string name;
  DType type = DType::f32;
  bool f16 = false;  // stored as F16, read into f32
  Shape shape;
  uint64_t begin = 0, end = 0;  // in the data section
};

// The dtype names tidal reads: their tidal type and bytes per element.
bool known_dtype(const std::string& dt, DType& type, bool& f16) {
  static const std::map<std::string, DType> kTypes = {{"F32", DType::f32}, {"BF16", DType::bf16}, {"F64", DType::f64},
                                                      {"I64", DType::i64}, {"I32", DType::i32},   {"U8", DType::u8},
                                                      {"BOOL", DType::u8}};
  f16 = dt == "F16";
  if (f16) return true;
  const auto it = kTypes.find(dt);
  if (it == kTypes.end()) return false;
  type = it->second;
  return true;
}

Entry read_entry(const std::string& name, const json& info, const std::string& where) {
  Entry e;
  e.name = name;
  const std::string field = where + ": tensor " + shown_name(name);
  const json* dtype = json_find(info, "dtype", field);
  const json* shape = json_find(info, "shape", field);
  const json* offsets = json_find(info, "data_offsets", field);
  TIDAL_CHECK(dtype && shape && offsets, field, " lacks dtype, shape or data_offsets");
  const std::string dt = json_string(*dtype, field + " dtype");
  TIDAL_CHECK(known_dtype(dt, e.type, e.f16), field,
              " has a dtype tidal does not read (F32, BF16, F16, F64, I64, I32, ", "U8, BOOL): ", shown_name(dt));
  const std::vector<int64_t> dims = json_int_array(*shape, field + " shape", size_t(Shape::kMaxDims));
  for (const int64_t d : dims) TIDAL_CHECK(d >= 0, field, " has a negative dimension in its shape");
  const int64_t numel = checked_product(dims, field + " shape");
  const int64_t bytes = checked_bytes(numel, e.f16 ? 2 : dtype_size(e.type), field + " size");
  e.shape = Shape(dims);
  const std::vector<int64_t> off = json_int_array(*offsets, field + " data_offsets", 2);
  TIDAL_CHECK(off.size() == 2 && off[0] >= 0 && off[0] <= off[1], field,
              " has invalid data_offsets: they must be [begin, end] with 0 <= begin <= end");
  e.begin = uint64_t(off[0]);
  e.end = uint64_t(off[1]);
  TIDAL_CHECK(e.end - e.begin == uint64_t(bytes), field, " is ", dt, " ", e.shape, " (", bytes, " bytes) but its ",
              "data_offsets span ", e.end - e.begin, " bytes");
  return e;
}

std::map<std::string, std::string> read_metadata(const json& info, const std::string& where) {
  std::map<std::string, std::string> out;
  TIDAL_CHECK(info.is_object(), where, ": __metadata__ must be an object of strings, found ", json_kind(info));
  for (const auto& [k, v] : info.items()) out[k] = json_string(v, where + ": __metadata__ field " + shown_name(k));
  return out;
}

// The tensors' bytes must tile the data section: contiguous from 0, no holes, no overlaps, nothing
// after the last (safetensors' own rule). Sorts `entries` by offset.
void check_layout(std::vector<Entry>& entries, uint64_t data_len, const std::string& where) {
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  uint64_t at = 0;
  for (const Entry& e : entries) {
    TIDAL_CHECK(e.begin == at, where, ": tensor ", shown_name(e.name), " starts at byte ", e.begin,
                " of the data section ", "but the tensors before it end at ", at,
                e.begin < at ? " (they overlap)" : " (a hole)");
    at = e.end;
  }
  TIDAL_CHECK(at == data_len, where, at > data_len ? " is truncated" : " has trailing bytes", ": the tensors cover ",
              at, " bytes but the data section has ", data_len);
}

void read_at(std::ifstream& f, uint64_t offset, void* dst, uint64_t n, const std::string& path) {
  f.seekg(std::streamoff(offset));
  f.read(static_cast<char*>(dst), std::streamsize(n));
  TIDAL_CHECK(f.good() && uint64_t(f.gcount()) == n, "[safetensors] cannot read ", n, " bytes at ", offset, " of ",
              path, " (was it changed while being read?)");
}

}  // namespace

Safetensors load_safetensors(const std::string& path, const std::function<bool(const std::string&)>& keep,
                             const SelectRows& rows) {
  TIDAL_CHECK(fs::is_regular_file(path), "[safetensors] ", path, " is not a regular file");
  std::ifstream f(path, std::ios::binary);
  TIDAL_CHECK(f.good(), "[safetensors] cannot open ", path);
  const uint64_t file_size = fs::file_size(path);
  TIDAL_CHECK(file_size >= 8, "[safetensors] ", path, " is truncated: ", file_size,
              " bytes, not even the 8-byte header length");
  uint64_t header_len = 0;
  read_at(f, 0, &header_len, 8, path);
  // Checked before anything is allocated: a 200 MB header is an attack, not a model.
  TIDAL_CHECK(header_len <= kMaxHeaderBytes, "[safetensors] ", path, ": the header claims ", header_len,
              " bytes, more than the ", kMaxHeaderBytes, " allowed (safetensors' own limit); not a model file");
  TIDAL_CHECK(header_len <= file_size - 8, "[safetensors] ", path,
              " is truncated or not a safetensors file: ", "the header claims ", header_len, " bytes but the file has ",
              file_size - 8, " after the length");
  std::string text(header_len, '\0');
  read_at(f, 8, text.data(), header_len, path);
  const std::string where = "[safetensors] " + path;
  const json header = parse_json(text, where + " (header)");
  TIDAL_CHECK(header.is_object(), where, ": the header must be a JSON object, found ", json_kind(header));
  const uint64_t data_start = 8 + header_len, data_len = file_size - data_start;

  Safetensors out;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      out.metadata = read_metadata(info, where);
      continue;
    }
    entries.push_back(read_entry(name, info, where));
  }
  check_layout(entries, data_len, where);

  MemoryScope scope(MemoryCategory::parameter);
  for (const Entry& e : entries) {
    if (keep && !keep(e.name)) continue;
    uint64_t n = e.end - e.begin, at = e.begin;
    Shape shape = e.shape;
    if (const std::optional<RowRange> r = rows ? rows(e.name) : std::nullopt) {
      TIDAL_CHECK(!shape.empty() && r->first >= 0 && r->count >= 0 && r->first + r->count <= shape[0], where,
                  ": tensor ", shown_name(e.name), " of shape ", shape, " has no rows [", r->first, ", ",
                  r->first + r->count, ")");
      const uint64_t row_bytes = shape[0] == 0 ? 0 : n / uint64_t(shape[0]);
      at += uint64_t(r->first) * row_bytes;
      n = uint64_t(r->count) * row_bytes;
      shape[0] = r->count;
    }
    Tensor t;
    if (e.f16) {
      std::vector<uint16_t> half(size_t(n / 2));
      if (n > 0) read_at(f, data_start + at, half.data(), n, path);
      t = empty(shape, DType::f32);
      float* p = t.data<float>();
      for (size_t i = 0; i < half.size(); ++i) p[i] = half_to_float(half[i]);
    } else {
      t = empty(shape, e.type);
      if (n > 0) read_at(f, data_start + at, t.raw_data(), n, path);
    }
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<TensorEntry> entries;
  for (const auto& [name, t] : tensors) {
    TIDAL_CHECK(t.defined() && !t.is_meta(), "[safetensors] cannot save '", name,
                "': ", t.defined() ? "a meta tensor has no data" : "undefined tensor");
    entries.push_back({name, t.dtype(), t.shape()});
  }
  save_safetensors_streamed(
      path, std::move(entries), [&](const TensorEntry& e) { return tensors.at(e.name); }, metadata);
}

void save_safetensors_streamed(const std::string& path, std::vector<TensorEntry> entries,
                               const std::function<Tensor(const TensorEntry&)>& produce,
                               const std::map<std::string, std::string>& metadata) {
  std::sort(entries.begin(), entries.end(), [](const TensorEntry& a, const TensorEntry& b) { return a.name < b.name; });
  json header = json::object();
  uint64_t offset = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const TensorEntry& e = entries[i];
    TIDAL_ASSERT(i == 0 || entries[i - 1].name != e.name, "[safetensors] ", e.name, " twice");
    const uint64_t bytes = uint64_t(e.shape.numel()) * uint64_t(dtype_size(e.dtype));
    header[e.name] = {
        {"dtype", st_dtype(e.dtype)}, {"shape", e.shape.vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  write_atomically(path, [&](int fd) {
    const uint64_t len = text.size();
    write_all(fd, &len, 8, path);
    write_all(fd, text.data(), text.size(), path);
    for (const TensorEntry& e : entries) {
      Tensor t = produce(e);
      if (!t.is_meta()) t = t.detach().to(Device::cpu());  // the bytes are written from host memory
      t = t.contiguous();
      TIDAL_ASSERT(t.dtype() == e.dtype && t.shape() == e.shape, "[safetensors] ", e.name,
                   " is not what its header says");
      if (t.nbytes() > 0) write_all(fd, t.raw_data(), size_t(t.nbytes()), path);
    }
  });
}

}  // namespace tidal::io
