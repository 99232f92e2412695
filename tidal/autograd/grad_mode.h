#pragma once
// Whether ops record history for backward (thread-local, on by default).
namespace tidal::autograd {

bool grad_enabled();
void set_grad_enabled(bool on);

class GradModeGuard {
 public:
  explicit GradModeGuard(bool on) : saved_(grad_enabled()) { set_grad_enabled(on); }
  ~GradModeGuard() { set_grad_enabled(saved_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool saved_;
};

}  // namespace tidal::autograd

namespace tidal {
// Disables history recording in a scope (inference, optimizer updates).
class NoGradGuard : public autograd::GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};
}  // namespace tidal
