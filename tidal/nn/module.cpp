#include "tidal/nn/module.h"

#include <set>

#include "tidal/autograd/grad_mode.h"

namespace tidal::nn {

Tensor& Module::register_parameter(const std::string& name, Tensor t) {
  TIDAL_ASSERT(t.defined() && t.is_leaf(), "parameter ", name, " must be a defined leaf tensor");
  for (const auto& [n, p] : params_) TIDAL_ASSERT(n != name, "parameter ", name, " registered twice");
  t.set_requires_grad(true);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_slab(const std::string& name, Tensor t, const Shape& whole, int64_t row) {
  TIDAL_ASSERT(t.dim() == whole.size() && t.dim() > 0 && row >= 0 && row + t.size(0) <= whole[0], "slab ", name,
               " of shape ", t.shape(), " at row ", row, " is not rows of ", whole);
  for (int64_t d = 1; d < t.dim(); ++d) TIDAL_ASSERT(t.size(d) == whole[d], "slab ", name, " is not rows of ", whole);
  slabs_[name] = Slab{whole, row, t.size(0)};
  return register_parameter(name, std::move(t));
}

std::map<std::string, Slab> Module::named_slabs() const {
  std::map<std::string, Slab> out;
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m, const std::string& prefix) {
    for (const auto& [name, s] : m.slabs_) out.emplace(prefix + name, s);
    for (const auto& [n, child] : m.children_) walk(*child, prefix + n + ".");
  };
  walk(*this, "");
  return out;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t, bool persistent) {
  TIDAL_ASSERT(t.defined() && t.is_leaf() && !t.requires_grad(), "buffer ", name, " must be a leaf without gradient");
  for (const Named* list : {&params_, &buffers_, &transient_buffers_})
    for (const auto& [n, b] : *list) TIDAL_ASSERT(n != name, "buffer ", name, " is a registered name");
  Named& list = persistent ? buffers_ : transient_buffers_;
  list.emplace_back(name, std::move(t));
  return list.back().second;
}

void Module::collect(const std::string& prefix, Named Module::*which, Named& out) const {
  for (const auto& [name, p] : this->*which) out.emplace_back(prefix + name, p);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", which, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  Named out;
  collect("", &Module::params_, out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  Named out;
  collect("", &Module::buffers_, out);
  collect("", &Module::transient_buffers_, out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_trainable_parameters() const {
  Named out;
  for (auto& [name, p] : named_parameters())
    if (p.requires_grad()) out.emplace_back(name, p);
  return out;
}

void Module::for_each_module(const std::function<void(Module&)>& fn) {
  fn(*this);
  for (auto& [n, child] : children_) child->for_each_module(fn);
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::zero_grad() const {
  for (const Tensor& p : parameters()) p.zero_grad();
}

void Module::assign_names(const std::string& prefix) {
  name_ = prefix;
  for (auto& [n, child] : children_) child->assign_names(prefix.empty() ? n : prefix + "." + n);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  for (auto& [name, p] : named_parameters()) out.emplace(name, p.detach());
  Named persistent;
  collect("", &Module::buffers_, persistent);
  for (auto& [name, b] : persistent) out.emplace(name, b);
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  NoGradGuard no_grad;
  std::set<std::string> used;
  std::string missing;
  Named targets = named_parameters();
  collect("", &Module::buffers_, targets);
  const std::map<std::string, Slab> slabs = named_slabs();
  for (auto& [name, p] : targets) {
    auto it = state.find(name);
    if (it == state.end()) {
      missing += (missing.empty() ? "" : ", ") + name;
      continue;
    }
    Tensor from = it->second;
    auto slab = slabs.find(name);
    if (slab != slabs.end() && from.shape() == slab->second.whole && from.shape() != p.shape())
      from = from.narrow(0, slab->second.row, slab->second.rows);  // this slab's rows of the whole tensor
    TIDAL_CHECK(from.shape() == p.shape(), "[load_state_dict] ", name, " has shape ", from.shape(),
                " in the checkpoint but ", p.shape(), " in the model (is the config the same?)");
    p.copy_(from.to(p.dtype()).to(p.device()));  // a file's host tensor onto the model's device
    used.insert(name);
  }
  TIDAL_CHECK(missing.empty(), "[load_state_dict] the checkpoint lacks parameters of the model: ", missing);
  if (strict) {
    std::string extra;
    for (const auto& [name, t] : state)
      if (!used.count(name)) extra += (extra.empty() ? "" : ", ") + name;
    TIDAL_CHECK(extra.empty(), "[load_state_dict] the checkpoint has parameters the model does not: ", extra);
  }
}

}  // namespace tidal::nn
