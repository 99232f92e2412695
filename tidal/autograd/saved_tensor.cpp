#include "tidal/autograd/saved_tensor.h"

#include <vector>

#include "tidal/autograd/saved_tensor_log.h"

namespace tidal::autograd {
namespace {
thread_local std::vector<std::shared_ptr<SavedTensorHooks>> t_hooks;
}  // namespace

SavedTensorHooksGuard::SavedTensorHooksGuard(std::shared_ptr<SavedTensorHooks> hooks) {
  t_hooks.push_back(std::move(hooks));
}

SavedTensorHooksGuard::~SavedTensorHooksGuard() { t_hooks.pop_back(); }

std::shared_ptr<SavedTensorHooks> current_saved_tensor_hooks() { return t_hooks.empty() ? nullptr : t_hooks.back(); }

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) {
    state_ = State::undefined;
    return;
  }
  shape_ = t.shape();
  dtype_ = t.dtype();
  Tensor plain = t.detach();
  if (auto hooks = current_saved_tensor_hooks()) {
    packed_ = hooks->pack(plain);
    SavedTensorLog::note(plain, hooks->policy(packed_));
    hooks_ = std::move(hooks);
    state_ = State::hooked;
    return;
  }
  SavedTensorLog::note(plain, nullptr);
  tensor_ = std::move(plain);
  version_ = tensor_.storage()->version();
  tensor_.storage()->mark_saved();
  state_ = State::direct;
}

SavedTensor& SavedTensor::operator=(SavedTensor&& other) noexcept {
  if (this != &other) {
    reset();
    state_ = other.state_;
    tensor_ = std::move(other.tensor_);
    version_ = other.version_;
    hooks_ = std::move(other.hooks_);
    packed_ = std::move(other.packed_);
    held_ = std::move(other.held_);
    shape_ = other.shape_;
    dtype_ = other.dtype_;
    other.state_ = State::empty;
  }
  return *this;
}

Tensor SavedTensor::unpack(const char* node) const {
  switch (state_) {
    case State::undefined: return Tensor();
    case State::direct:
      TIDAL_CHECK(tensor_.storage()->version() == version_, "[autograd] ", node,
                  ": a tensor saved for backward was modified in place after it was saved (version ", version_, " -> ",
                  tensor_.storage()->version(), "); clone it before changing it");
      return tensor_;
    case State::hooked: {
      Tensor t = hooks_->unpack(packed_);
      TIDAL_ASSERT(t.defined() && t.shape() == shape_ && t.dtype() == dtype_, node, ": saved-tensor hooks returned ",
                   t.defined() ? t.shape().str() : "an undefined tensor", " for a saved ", shape_, " ", dtype_);
      if (!held_) {  // the node holds it until its backward ran: an activation meanwhile
        held_ = t.storage();
        held_->mark_saved();
      }
      return t;
    }
    case State::released:
    case State::empty: break;
  }
  TIDAL_CHECK(false, "[autograd] ", node,
              ": trying to backward through the graph a second time (its saved tensors were freed after the "
              "first backward); pass retain_graph=true to the first backward if you need a second one");
  return Tensor();
}

void SavedTensor::reset() {
  if (state_ == State::direct) tensor_.storage()->unmark_saved();
  if (held_) {
    held_->unmark_saved();
    held_.reset();
  }
  if (state_ == State::direct || state_ == State::hooked) state_ = State::released;
  tensor_ = Tensor();
  hooks_.reset();
  packed_.reset();
}

}  // namespace tidal::autograd
