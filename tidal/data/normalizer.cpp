#include "tidal/data/normalizer.h"

#include <algorithm>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "tidal/base/error.h"
#include "tidal/base/json.h"
#include "tidal/data/byte_level.h"
#include "tidal/data/nfc_tables.h"

namespace tidal::data {
namespace {

// Hangul syllables compose and decompose by arithmetic (Unicode ch. 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

struct Tables {
  std::unordered_map<char32_t, std::pair<char32_t, char32_t>> decomposition;  // raw mapping, second 0 if none
  std::unordered_map<uint64_t, char32_t> composition;                         // (a << 32 | b) -> composite
  std::vector<bool> unsafe;  // below 0x30000: may change under NFC (quick check "no"/"maybe" or ccc != 0)

  Tables() : unsafe(0x30000, false) {
    const auto& ccc = nfc_data::kCombiningClass;
    for (size_t i = 0; i < std::size(ccc); i += 3)
      for (char32_t c = ccc[i]; c <= ccc[i + 1]; ++c) mark(c);
    const auto& dec = nfc_data::kDecomposition;
    for (size_t i = 0; i < std::size(dec); i += 3) {
      const char32_t cp = dec[i] & 0x7FFFFFFFu, a = dec[i + 1], b = dec[i + 2];
      const bool excluded = (dec[i] >> 31) != 0;
      decomposition[cp] = {a, b};
      if (excluded) {
        mark(cp);  // never recomposed: NFC changes it
      } else {
        composition[(uint64_t(a) << 32) | b] = cp;
        mark(b);  // may combine with what precedes it
      }
    }
    for (char32_t c = kVBase; c < kVBase + kVCount; ++c) mark(c);
    for (char32_t c = kTBase + 1; c < kTBase + kTCount; ++c) mark(c);
  }
  void mark(char32_t c) {
    if (c < unsafe.size()) unsafe[c] = true;
  }
  bool is_unsafe(char32_t c) const { return c < unsafe.size() ? bool(unsafe[c]) : false; }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

int combining_class(char32_t c) {
  if (c < 0x300) return 0;
  const auto& t = nfc_data::kCombiningClass;
  // Binary search over the (first, last, class) triples.
  size_t lo = 0, hi = std::size(t) / 3;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (t[3 * mid + 1] < c)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < std::size(t) / 3 && t[3 * lo] <= c ? int(t[3 * lo + 2]) : 0;
}

void decompose(char32_t c, std::vector<char32_t>& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto& map = tables().decomposition;
  auto it = map.find(c);
  if (it == map.end()) {
    out.push_back(c);
    return;
  }
  decompose(it->second.first, out);
  if (it->second.second != 0) decompose(it->second.second, out);
}

char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto& map = tables().composition;
  auto it = map.find((uint64_t(a) << 32) | b);
  return it == map.end() ? 0 : it->second;
}

// NFC of one run of valid UTF-8, appended to out.
void nfc_run(std::string_view run, std::string& out) {
  std::vector<char32_t> cps;
  for (size_t i = 0; i < run.size();) {
    const int len = utf8_char_length(run, i);
    decompose(utf8_decode(run, i, len), cps);
    i += size_t(len);
  }
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + long(i), cps.begin() + long(j),
                     [](char32_t x, char32_t y) { return combining_class(x) < combining_class(y); });
    i = j;
  }
  // Canonical composition (UAX #15): combine each character with the last starter unless blocked.
  if (!cps.empty()) {
    size_t starter = 0, kept = 1;
    bool have_starter = combining_class(cps[0]) == 0;
    int last_class = have_starter ? 0 : 256;
    for (size_t i = 1; i < cps.size(); ++i) {
      const char32_t c = cps[i];
      const int cls = combining_class(c);
      const char32_t composite = have_starter ? compose(cps[starter], c) : 0;
      if (composite != 0 && (last_class < cls || last_class == 0)) {
        cps[starter] = composite;
        continue;
      }
      if (cls == 0) {
        starter = kept;
        have_starter = true;
      }
      last_class = cls;
      cps[kept++] = c;
    }
    cps.resize(kept);
  }
  for (char32_t c : cps) utf8_append(c, out);
}

}  // namespace

bool is_nfc_quick(std::string_view text) {
  const Tables& t = tables();
  for (size_t i = 0; i < text.size();) {
    if (uint8_t(text[i]) < 0xCC) {  // below U+0300 (or an invalid byte): never changes
      ++i;
      continue;
    }
    const int len = utf8_char_length(text, i);
    if (len == 0) {
      ++i;
      continue;
    }
    if (t.is_unsafe(utf8_decode(text, i, len))) return false;
    i += size_t(len);
  }
  return true;
}

std::string nfc(std::string_view text) {
  if (is_nfc_quick(text)) return std::string(text);
  std::string out;
  out.reserve(text.size());
  split_valid_utf8(
      text, [&](std::string_view run) { nfc_run(run, out); }, [&](std::string_view byte) { out += byte; });
  return out;
}

namespace {

// Whether the normalizer `j` (field `path` of `source`) asks for NFC; Sequences recurse at most
// kMaxSequenceDepth deep.
bool wants_nfc(const nlohmann::json& j, std::string_view source, const std::string& path, int depth) {
  const std::string where = detail::str_cat(source, " field '", path, "'");
  TIDAL_CHECK(depth <= Normalizer::kMaxSequenceDepth, where, " nests Sequences more than ",
              Normalizer::kMaxSequenceDepth, " deep");
  TIDAL_CHECK(j.is_object(), where, " must be an object, found ", json_kind(j));
  const nlohmann::json* type = json_find(j, "type", where);
  TIDAL_CHECK(type != nullptr, where, " has no type");
  const std::string name = json_string(*type, detail::str_cat(source, " field '", path, ".type'"));
  if (name == "NFC") return true;
  TIDAL_CHECK(name == "Sequence", where, " is a normalizer tidal does not support (supported: NFC, Sequence of NFC)");
  const nlohmann::json* list = json_find(j, "normalizers", where);
  TIDAL_CHECK(list != nullptr && list->is_array(), source, " field '", path, ".normalizers' must be an array, found ",
              list ? json_kind(*list) : "nothing");
  bool nfc = false;
  for (size_t i = 0; i < list->size(); ++i)
    nfc = wants_nfc((*list)[i], source, detail::str_cat(path, ".normalizers[", i, "]"), depth + 1) || nfc;
  return nfc;
}

}  // namespace

Normalizer Normalizer::from_json(const nlohmann::json& j, std::string_view source) {
  Normalizer n;
  if (!j.is_null()) n.nfc_ = wants_nfc(j, source, "normalizer", 0);
  return n;
}

std::string_view Normalizer::apply(std::string_view text, std::string& scratch) const {
  if (!nfc_ || is_nfc_quick(text)) return text;
  scratch = nfc(text);
  return scratch;
}

}  // namespace tidal::data
