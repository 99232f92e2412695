#pragma once
// Modules: a tree of named parameters (Hugging Face names, e.g. "model.layers.0.mlp.up_proj.weight")
// and submodules. A model is a Module; its state dict is what safetensors files hold.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tidal/nn/slab.h"
#include "tidal/tensor.h"

namespace tidal::nn {

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter of this module and its descendants, with dotted names, in registration order.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  // Those of them that train (requires_grad): all but the frozen ones (LoRA freezes the base, nn/lora.h).
  std::vector<std::pair<std::string, Tensor>> named_trainable_parameters() const;
  // The parameters that are slabs of a whole tensor (register_slab), by their dotted names; empty for most models.
  std::map<std::string, Slab> named_slabs() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;
  void zero_grad() const;

  // Training mode turns dropout on (on by default).
  void train(bool on = true);
  bool is_training() const { return training_; }

  // Every buffer (state without gradient or optimizer state: DeepSeek-V3's router correction bias, and the
  // routers' token counts), with dotted names: the persistent ones (saved and loaded), then the rest.
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;

  // Copies values from `state` into the parameters and buffers (by name). Every one must be present with
  // its shape (a slab: its own, or the whole tensor's, of which it takes its rows); dtypes convert. Extra entries are
  // an error when `strict`. Throws naming what is wrong.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);
  // The parameters and buffers.
  std::map<std::string, Tensor> state_dict() const;

  // Dotted names ("model.layers.0.mlp"), set for the whole tree by assign_names() on the root;
  // forward() runs under a ModuleScope with it, so saved tensors and allocations know their module.
  void assign_names(const std::string& prefix = "");
  const char* name() const { return name_.c_str(); }
  // Calls fn on this module and every descendant, parents first, in registration order.
  void for_each_module(const std::function<void(Module&)>& fn);

 protected:
  // Registers a parameter (requires_grad is set; accounted as MemoryCategory::parameter when
  // created under MemoryScope(parameter)) and returns it.
  Tensor& register_parameter(const std::string& name, Tensor t);
  // Registers parameter `t` as rows [row, row + t.size(0)) of a whole tensor of shape `whole` (a Slab).
  Tensor& register_slab(const std::string& name, Tensor t, const Shape& whole, int64_t row);
  // Registers a buffer (no gradient) and returns it. A persistent one is part of the state dict (saved and
  // loaded, as PyTorch's register_buffer), a non-persistent one only of named_buffers().
  Tensor& register_buffer(const std::string& name, Tensor t, bool persistent = true);
  // Registers a child; it must outlive nothing: the parent owns it.
  template <typename M>
  M& register_module(const std::string& name, std::unique_ptr<M> m) {
    M& ref = *m;
    children_.emplace_back(name, std::move(m));
    return ref;
  }

 private:
  using Named = std::vector<std::pair<std::string, Tensor>>;
  void collect(const std::string& prefix, Named Module::*which, Named& out) const;
  Named params_;
  Named buffers_;            // persistent
  Named transient_buffers_;  // not persistent
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  std::map<std::string, Slab> slabs_;  // by parameter name
  bool training_ = true;
  std::string name_;
};

// Children named "0", "1", ... (Hugging Face's nn.ModuleList naming).
template <typename M>
class ModuleList : public Module {
 public:
  M& add(std::unique_ptr<M> m) {
    items_.push_back(&register_module(std::to_string(items_.size()), std::move(m)));
    return *items_.back();
  }
  M& operator[](size_t i) const { return *items_[i]; }
  size_t size() const { return items_.size(); }

 private:
  std::vector<M*> items_;
};

// Named children with no forward of their own: a level of the parameter names (GPT-2's "attn" and
// "mlp" hold "c_attn", "c_proj", ... so the names match Hugging Face's).
class ModuleDict : public Module {
 public:
  template <typename M>
  M* add(const std::string& name, std::unique_ptr<M> m) {
    return &register_module(name, std::move(m));
  }
};

}  // namespace tidal::nn
