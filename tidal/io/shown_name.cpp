#include "tidal/io/shown_name.h"

namespace tidal::io {

std::string shown_name(const std::string& name) {
  constexpr size_t kShown = 64;
  std::string s = name.substr(0, kShown);
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return "'" + s + (name.size() > kShown ? "...'" : "'");
}

}  // namespace tidal::io
