#pragma once
// Renders a file in headless Chromium (Debian's `chromium`, installed by scripts/setup.sh) to a PNG
// and decodes the PNG, so tests can check that tidal's SVGs draw what they should in a real browser.
#include <sys/wait.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tidal::testing {

// The chromium binary, or "" when it is not installed.
inline std::string find_chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"}) {
    std::ifstream f(p);
    if (f.good()) return p;
  }
  return "";
}

// Screenshots `file` (an absolute path) at width x height into `png`. Returns "" on success, else
// what went wrong (with chromium's output).
inline std::string render_in_chromium(const std::string& chromium, const std::string& file, const std::string& png,
                                      int width, int height, const std::string& profile_dir) {
  std::remove(png.c_str());
  const std::string cmd = "timeout 120 " + chromium +
                          " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
                          " --disable-background-networking --disable-component-update --disable-sync"
                          " --disable-dev-shm-usage --hide-scrollbars --user-data-dir=" +
                          profile_dir + " --window-size=" + std::to_string(width) + "," + std::to_string(height) +
                          " --screenshot=" + png + " file://" + file + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "cannot run " + cmd;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  std::ifstream f(png);
  if (!f.good())
    return "chromium wrote no screenshot (exit status " + std::to_string(status) + "): " + cmd + "\n" + out;
  return "";
}

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3
  const uint8_t* at(int x, int y) const { return &rgb[(size_t(y) * size_t(width) + size_t(x)) * 3]; }
};

// Decodes an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes). Throws std::runtime_error.
inline Image decode_png(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string d = ss.str();
  auto u32 = [&](size_t i) {
    return (uint32_t(uint8_t(d[i])) << 24) | (uint32_t(uint8_t(d[i + 1])) << 16) | (uint32_t(uint8_t(d[i + 2])) << 8) |
           uint32_t(uint8_t(d[i + 3]));
  };
  if (d.size() < 8 || d.compare(1, 3, "PNG") != 0) throw std::runtime_error(path + " is not a PNG");
  Image img;
  int color_type = 0;
  std::string idat;
  for (size_t i = 8; i + 8 <= d.size();) {
    const uint32_t len = u32(i);
    const std::string type = d.substr(i + 4, 4);
    if (type == "IHDR") {
      img.width = int(u32(i + 8));
      img.height = int(u32(i + 12));
      if (uint8_t(d[i + 16]) != 8 || uint8_t(d[i + 20]) != 0)
        throw std::runtime_error("unsupported PNG bit depth or interlace");
      color_type = uint8_t(d[i + 17]);
    } else if (type == "IDAT") {
      idat += d.substr(i + 8, len);
    }
    i += 12 + len;
  }
  if (color_type != 2 && color_type != 6) throw std::runtime_error("unsupported PNG color type");
  const int bpp = color_type == 6 ? 4 : 3;
  const size_t stride = size_t(img.width) * size_t(bpp);
  std::vector<uint8_t> raw((stride + 1) * size_t(img.height));
  uLongf raw_len = raw.size();
  if (uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_len != raw.size())
    throw std::runtime_error("bad PNG data");
  std::vector<uint8_t> prev(stride, 0), cur(stride);
  img.rgb.resize(size_t(img.width) * size_t(img.height) * 3);
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* line = &raw[size_t(y) * (stride + 1)];
    const int filter = line[0];
    for (size_t x = 0; x < stride; ++x) {
      const int a = x >= size_t(bpp) ? cur[x - size_t(bpp)] : 0, b = prev[x],
                c = x >= size_t(bpp) ? prev[x - size_t(bpp)] : 0;
      int pred = 0;
      if (filter == 1) pred = a;
      if (filter == 2) pred = b;
      if (filter == 3) pred = (a + b) / 2;
      if (filter == 4) {
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      cur[x] = uint8_t(line[1 + x] + pred);
    }
    for (int x = 0; x < img.width; ++x)
      for (int k = 0; k < 3; ++k)
        img.rgb[(size_t(y) * size_t(img.width) + size_t(x)) * 3 + size_t(k)] = cur[size_t(x) * size_t(bpp) + size_t(k)];
    std::swap(prev, cur);
  }
  return img;
}

// Pixels within `tol` of the color "#rrggbb".
inline int64_t count_color(const Image& img, const std::string& hex, int tol = 12) {
  const int r = std::stoi(hex.substr(1, 2), nullptr, 16), g = std::stoi(hex.substr(3, 2), nullptr, 16),
            b = std::stoi(hex.substr(5, 2), nullptr, 16);
  int64_t n = 0;
  for (size_t i = 0; i + 2 < img.rgb.size(); i += 3)
    if (std::abs(img.rgb[i] - r) <= tol && std::abs(img.rgb[i + 1] - g) <= tol && std::abs(img.rgb[i + 2] - b) <= tol)
      ++n;
  return n;
}

}  // namespace tidal::testing
