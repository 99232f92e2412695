#pragma once
// What an autograd node keeps for its backward. At save time the innermost SavedTensorHooks on this
// thread's stack may pack the tensor into anything (an index for recompute, a host copy for
// offload); at use time the same hooks unpack it. With no hooks the tensor itself is kept and its
// storage is accounted as an activation while saved. PyTorch's saved-tensor-hooks design.
// See docs/autograd.md.
#include <memory>

#include "tidal/tensor.h"

namespace tidal::autograd {

class SavedTensorHooks {
 public:
  virtual ~SavedTensorHooks() = default;
  // Called when a node saves `t` (a view without history). Whatever is returned is handed to unpack.
  virtual std::shared_ptr<void> pack(const Tensor& t) = 0;
  // Called when the node's backward needs the tensor back; must return the same values, shape and dtype.
  // The returned tensor counts as an activation until the node's backward has run.
  virtual Tensor unpack(const std::shared_ptr<void>& packed) = 0;
  // What these hooks did to a saved tensor (given what pack returned), for the memory report:
  // "recomputed", "offloaded", "kept", ...
  virtual const char* policy(const std::shared_ptr<void>& /*packed*/) const { return "hooked"; }
};

// Pushes hooks for the scope (RAII). The innermost hooks win. Pushing nullptr disables hooks in
// the scope.
class SavedTensorHooksGuard {
 public:
  explicit SavedTensorHooksGuard(std::shared_ptr<SavedTensorHooks> hooks);
  ~SavedTensorHooksGuard();
  SavedTensorHooksGuard(const SavedTensorHooksGuard&) = delete;
  SavedTensorHooksGuard& operator=(const SavedTensorHooksGuard&) = delete;
};

// The innermost hooks on this thread, or nullptr.
std::shared_ptr<SavedTensorHooks> current_saved_tensor_hooks();

class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  ~SavedTensor() { reset(); }
  SavedTensor(SavedTensor&& other) noexcept { *this = std::move(other); }
  SavedTensor& operator=(SavedTensor&& other) noexcept;
  SavedTensor(const SavedTensor&) = delete;
  SavedTensor& operator=(const SavedTensor&) = delete;

  // The tensor, as saved. Throws if it was released (a second backward through a freed graph) or
  // modified in place since it was saved. `node` names the op in the message.
  Tensor unpack(const char* node) const;
  // Drops the tensor (or the hooks' packed object).
  void reset();
  bool was_saved() const { return state_ != State::empty; }

 private:
  enum class State { empty, undefined, direct, hooked, released };
  State state_ = State::empty;
  Tensor tensor_;  // direct
  uint64_t version_ = 0;
  std::shared_ptr<SavedTensorHooks> hooks_;
  std::shared_ptr<void> packed_;
  mutable std::shared_ptr<Storage> held_;  // what hooks' unpack returned, an activation until reset
  Shape shape_;                            // what unpack must return
  DType dtype_ = DType::f32;
};

}  // namespace tidal::autograd
