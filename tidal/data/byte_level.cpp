#include "tidal/data/byte_level.h"

#include <algorithm>
#include <array>

namespace tidal::data {
namespace {

bool maps_to_itself(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

struct Tables {
  std::array<char32_t, 256> byte_cp{};
  std::array<std::string, 256> byte_utf8;
  std::array<uint8_t, 256> order{};
  std::array<int16_t, 256 + 68> cp_byte{};  // code point -> byte, -1 if none
  Tables() {
    cp_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) byte_cp[size_t(b)] = maps_to_itself(b) ? char32_t(b) : char32_t(256 + extra++);
    for (int b = 0; b < 256; ++b) {
      utf8_append(byte_cp[size_t(b)], byte_utf8[size_t(b)]);
      cp_byte[byte_cp[size_t(b)]] = int16_t(b);
    }
    for (int b = 0; b < 256; ++b) order[size_t(b)] = uint8_t(b);
    std::sort(order.begin(), order.end(), [&](uint8_t x, uint8_t y) { return byte_cp[x] < byte_cp[y]; });
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_to_symbol(uint8_t b) { return tables().byte_utf8[b]; }

int symbol_to_byte(char32_t cp) { return cp < 256 + 68 ? tables().cp_byte[cp] : -1; }

void append_symbols(std::string_view bytes, std::string& out) {
  const Tables& t = tables();
  for (unsigned char c : bytes) out += t.byte_utf8[c];
}

std::string symbols_to_bytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const int len = utf8_char_length(token, i);
    const int b = len > 0 ? symbol_to_byte(utf8_decode(token, i, len)) : -1;
    if (b < 0) return std::string(token);
    out += char(b);
    i += size_t(len);
  }
  return out;
}

const uint8_t* byte_rank_order() { return tables().order.data(); }

int utf8_char_length(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return uint8_t(s[k]); };
  const uint8_t c = at(i);
  const size_t left = s.size() - i;
  const auto cont = [&](size_t k) { return (at(k) & 0xC0) == 0x80; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return left >= 2 && cont(i + 1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 3 || !cont(i + 1) || !cont(i + 2)) return 0;
    if (c == 0xE0 && at(i + 1) < 0xA0) return 0;   // overlong
    if (c == 0xED && at(i + 1) >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 4 || !cont(i + 1) || !cont(i + 2) || !cont(i + 3)) return 0;
    if (c == 0xF0 && at(i + 1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && at(i + 1) >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

char32_t utf8_decode(std::string_view s, size_t i, int length) {
  const auto at = [&](size_t k) { return char32_t(uint8_t(s[i + k])); };
  switch (length) {
    case 1: return at(0);
    case 2: return ((at(0) & 0x1F) << 6) | (at(1) & 0x3F);
    case 3: return ((at(0) & 0x0F) << 12) | ((at(1) & 0x3F) << 6) | (at(2) & 0x3F);
    default: return ((at(0) & 0x07) << 18) | ((at(1) & 0x3F) << 12) | ((at(2) & 0x3F) << 6) | (at(3) & 0x3F);
  }
}

void utf8_append(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

}  // namespace tidal::data
