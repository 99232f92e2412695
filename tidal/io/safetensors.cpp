#include "tidal/io/safetensors.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "tidal/io/atomic_file.h"
#include "tidal/memory_scope.h"

namespace tidal::io {
namespace {

using json = nlohmann::json;

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

}  // namespace

Safetensors load_safetensors(const std::string& path) {
  const std::string bytes = read_file(path);
  TIDAL_CHECK(bytes.size() >= 8, "[safetensors] ", path, " is truncated: ", bytes.size(),
              " bytes, not even the 8-byte header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  TIDAL_CHECK(header_len <= bytes.size() - 8, "[safetensors] ", path,
              " is truncated or not a safetensors file: ", "the header claims ", header_len, " bytes but the file has ",
              bytes.size() - 8, " after the length");
  json header;
  try {
    header = json::parse(bytes.substr(8, header_len));
  } catch (const json::exception& e) {
    TIDAL_CHECK(false, "[safetensors] ", path, " has a malformed header: ", e.what());
  }
  TIDAL_CHECK(header.is_object(), "[safetensors] ", path, ": the header is not a JSON object");
  const size_t data_start = 8 + header_len, data_len = bytes.size() - data_start;
  Safetensors out;
  MemoryScope scope(MemoryCategory::parameter);
  for (auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (info.is_object())
        for (auto& [k, v] : info.items()) out.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    TIDAL_CHECK(info.is_object() && info.contains("dtype") && info.contains("shape") && info.contains("data_offsets"),
                "[safetensors] ", path, ": entry '", name, "' lacks dtype, shape or data_offsets");
    const std::string dt = info["dtype"].get<std::string>();
    Shape shape;
    for (const json& d : info["shape"]) {
      TIDAL_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, "[safetensors] ", path, ": '", name,
                  "' has an invalid shape ", info["shape"].dump());
      shape.push_back(d.get<int64_t>());
    }
    const json& off = info["data_offsets"];
    TIDAL_CHECK(off.is_array() && off.size() == 2, "[safetensors] ", path, ": '", name, "' has invalid data_offsets");
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    TIDAL_CHECK(begin <= end && end <= data_len, "[safetensors] ", path, " is truncated: '", name, "' spans bytes [",
                begin, ", ", end, ") but the data section has ", data_len);
    const char* src = bytes.data() + data_start + begin;
    const uint64_t n = end - begin;
    auto expect_bytes = [&](int64_t item) {
      TIDAL_CHECK(int64_t(n) == shape.numel() * item, "[safetensors] ", path, ": '", name, "' is ", dt, " ", shape,
                  " (", shape.numel() * item, " bytes) but has ", n, " bytes of data");
    };
    Tensor t;
    if (dt == "F16") {
      expect_bytes(2);
      t = empty(shape, DType::f32);
      float* p = t.data<float>();
      for (int64_t i = 0; i < shape.numel(); ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        p[i] = half_to_float(h);
      }
    } else {
      DType type;
      if (dt == "F32")
        type = DType::f32;
      else if (dt == "BF16")
        type = DType::bf16;
      else if (dt == "F64")
        type = DType::f64;
      else if (dt == "I64")
        type = DType::i64;
      else if (dt == "I32")
        type = DType::i32;
      else if (dt == "U8" || dt == "BOOL")
        type = DType::u8;
      else
        TIDAL_CHECK(false, "[safetensors] ", path, ": '", name, "' has dtype ", dt,
                    ", which tidal does not read (F32, BF16, F16, F64, I64, I32, U8, BOOL)");
      expect_bytes(dtype_size(type));
      t = empty(shape, type);
      if (n > 0) std::memcpy(t.raw_data(), src, n);
    }
    out.tensors.emplace(name, std::move(t));
  }
  return out;
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  uint64_t offset = 0;
  std::vector<Tensor> order;
  for (const auto& [name, t] : tensors) {
    TIDAL_CHECK(t.defined() && !t.is_meta(), "[safetensors] cannot save '", name,
                "': ", t.defined() ? "a meta tensor has no data" : "undefined tensor");
    Tensor c = t.contiguous();
    header[name] = {{"dtype", st_dtype(c.dtype())},
                    {"shape", c.shape().vec()},
                    {"data_offsets", {offset, offset + uint64_t(c.nbytes())}}};
    offset += uint64_t(c.nbytes());
    order.push_back(c);
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  write_atomically(path, [&](int fd) {
    const uint64_t len = text.size();
    write_all(fd, &len, 8, path);
    write_all(fd, text.data(), text.size(), path);
    for (const Tensor& t : order)
      if (t.nbytes() > 0) write_all(fd, t.raw_data(), size_t(t.nbytes()), path);
  });
}

}  // namespace tidal::io
