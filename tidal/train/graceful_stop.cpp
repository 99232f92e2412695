#include "tidal/train/graceful_stop.h"

#include "tidal/base/error.h"
#include "tidal/dist/collectives.h"

namespace tidal::train {

GracefulStop::GracefulStop(int64_t exit_interval, double exit_duration_minutes, bool signal_handler,
                           Clock::time_point started)
    : interval_(exit_interval),
      minutes_(exit_duration_minutes),
      signal_on_(signal_handler),
      signal_(signal_handler),
      started_(started) {}

StopReason GracefulStop::after(int64_t it, int64_t last, dist::Communicator& comm) const {
  if (it >= last) return StopReason::none;
  StopReason mine = StopReason::none;
  if (signal_.received()) {
    mine = StopReason::signal;
  } else if (minutes_ > 0) {
    const double minutes = std::chrono::duration<double>(Clock::now() - started_).count() / 60;
    if (minutes > minutes_) mine = StopReason::duration;  // Megatron: train_time > exit_duration_in_mins
  }
  if (signal_on_ || minutes_ > 0) mine = StopReason(int(dist::all_reduce_max(comm, double(int(mine)))));
  if (mine == StopReason::none && interval_ > 0 && it % interval_ == 0) mine = StopReason::interval;
  return mine;
}

std::string GracefulStop::describe(StopReason why, int64_t it, int64_t last) const {
  const std::string stopped = detail::str_cat("stopped after iteration ", it, " of ", last);
  switch (why) {
    case StopReason::signal: return detail::str_cat("received SIGTERM: ", stopped, " (--exit-signal-handler)");
    case StopReason::duration:
      return detail::str_cat(minutes_, " minutes have passed: ", stopped, " (--exit-duration-in-mins ", minutes_, ")");
    case StopReason::interval: return detail::str_cat(stopped, " (--exit-interval ", interval_, ")");
    case StopReason::none: break;
  }
  return stopped;
}

}  // namespace tidal::train
