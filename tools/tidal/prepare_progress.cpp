#include "tools/tidal/prepare_progress.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

namespace tidal::cli {

int64_t log_interval(const Flags& a) { return a.integer("log-interval", 0, 1, int64_t(1) << 40); }

int64_t input_bytes(const std::vector<std::string>& files) {
  int64_t total = 0;
  std::error_code ec;
  for (const std::string& f : files) {
    const auto size = std::filesystem::file_size(f, ec);
    if (!ec) total += int64_t(size);
  }
  return total;
}

PrepareProgress::PrepareProgress(std::string unit, int64_t log_interval, int64_t total_bytes, std::FILE* out)
    : unit_(std::move(unit)),
      log_interval_(log_interval),
      total_bytes_(total_bytes),
      next_log_(log_interval),
      out_(out),
      terminal_(::isatty(fileno(out)) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void PrepareProgress::update(int64_t done, int64_t bytes) {
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::max(1e-9, std::chrono::duration<double>(now - start_).count());
  const double mb = double(bytes) / 1e6;
  if (log_interval_ > 0 && done >= next_log_) {
    clear();
    std::fprintf(out_, "processed %lld %s (%.0f %s/s, %.1f MB/s)\n", (long long)done, unit_.c_str(),
                 double(done) / seconds, unit_.c_str(), mb / seconds);
    next_log_ = (done / log_interval_ + 1) * log_interval_;
  }
  if (!terminal_ || std::chrono::duration<double>(now - last_draw_).count() < 0.2) return;
  last_draw_ = now;
  if (total_bytes_ > 0) {
    const double share = std::min(1.0, double(bytes) / double(total_bytes_));
    const int width = 30, filled = int(width * share);
    std::fprintf(out_, "\r  [%.*s%*s] %3.0f%%", filled, "==============================", width - filled, "",
                 100 * share);
  } else {
    std::fprintf(out_, "\r ");
  }
  std::fprintf(out_, "  %lld %s, %.1f MB, %.1f MB/s ", (long long)done, unit_.c_str(), mb, mb / seconds);
  std::fflush(out_);
  drawn_ = true;
}

void PrepareProgress::clear() {
  if (!drawn_) return;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace tidal::cli
