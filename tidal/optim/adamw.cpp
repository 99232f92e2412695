#include "tidal/optim/adamw.h"

#include <nlohmann/json.hpp>
#include <set>

#include "tidal/autograd/grad_mode.h"
#include "tidal/memory_scope.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal::optim {

bool default_weight_decay(const std::string& name, const Tensor& param) {
  return param.dim() > 1 && !name.ends_with(".bias") && name != "bias";
}

AdamW::AdamW(NamedParameters params, AdamWOptions options, const DecayRule& decay) : options_(options) {
  TIDAL_CHECK(options.lr >= 0, "[adamw] lr must be >= 0, got ", options.lr);
  TIDAL_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
              "[adamw] betas must be in [0, 1), got ", options.beta1, ", ", options.beta2);
  TIDAL_CHECK(options.eps >= 0, "[adamw] eps must be >= 0, got ", options.eps);
  TIDAL_CHECK(options.weight_decay >= 0, "[adamw] weight_decay must be >= 0, got ", options.weight_decay);
  std::set<std::string> names;
  for (auto& [name, p] : params) {
    TIDAL_CHECK(p.defined(), "[adamw] parameter '", name, "' is undefined");
    TIDAL_CHECK(names.insert(name).second, "[adamw] parameter name '", name, "' appears twice");
    TIDAL_CHECK(is_floating(p.dtype()), "[adamw] parameter '", name, "' is ", p.dtype(), ", not floating");
    TIDAL_CHECK(p.is_contiguous(), "[adamw] parameter '", name, "' ", p.shape(), " is not contiguous");
    Slot s;
    s.name = name;
    s.param = p;
    s.decay = decay ? decay(name, p) : true;
    slots_.push_back(std::move(s));
  }
}

void AdamW::init_state(Slot& s) const {
  MemoryScope scope(MemoryCategory::optimizer_state);
  const DType state_dtype = s.param.dtype() == DType::f64 ? DType::f64 : DType::f32;
  s.exp_avg = zeros(s.param.shape(), state_dtype, s.param.device());
  s.exp_avg_sq = zeros(s.param.shape(), state_dtype, s.param.device());
  if (s.param.dtype() == DType::bf16) s.master = s.param.detach().to(DType::f32);  // exact: bf16 is a prefix of f32
}

void AdamW::check_lr(double lr) { TIDAL_CHECK(lr >= 0, "[adamw] lr must be >= 0, got ", lr); }

Tensor AdamW::begin_update(Slot& s) {
  Tensor g = s.param.grad();
  if (!g.defined()) return g;  // PyTorch: `if p.grad is None: continue`
  const bool main_grad = s.param.dtype() == DType::bf16 && g.dtype() == DType::f32;  // --bf16's f32 sums
  TIDAL_CHECK(
      g.shape() == s.param.shape() && (g.dtype() == s.param.dtype() || main_grad) && g.device() == s.param.device(),
      "[adamw] gradient of '", s.name, "' is ", g.shape(), " ", g.dtype(), " on ", g.device(), " but the parameter is ",
      s.param.shape(), " ", s.param.dtype(), " on ", s.param.device());
  if (!s.exp_avg.defined()) init_state(s);
  ++s.step;
  return g.contiguous();
}

void AdamW::update(std::span<const Update> updates, double lr) const {
  const Tensor none;  // the master of an entry that has none
  std::vector<AdamWTensors> tensors;
  tensors.reserve(updates.size());
  for (size_t begin = 0, end = 0; begin < updates.size(); begin = end) {
    const Device device = updates[begin].param.device();
    tensors.clear();
    for (end = begin; end < updates.size() && updates[end].param.device() == device; ++end) {
      const Update& u = updates[end];
      AdamWTensors t;
      t.args.lr = lr;
      t.args.beta1 = options_.beta1;
      t.args.beta2 = options_.beta2;
      t.args.eps = options_.eps;
      t.args.weight_decay = u.slot->decay ? options_.weight_decay : 0.0;
      t.args.step = u.slot->step;
      t.grad = &u.grad;
      t.exp_avg = &u.exp_avg;
      t.exp_avg_sq = &u.exp_avg_sq;
      if (u.grad.dtype() == u.param.dtype()) {
        t.param = &u.param;
        t.master = &u.master;
      } else {
        // An f32 gradient of a bf16 parameter (--bf16): the f32 update of the master weights, then the
        // bf16 parameter written from them, rounded to nearest even as the fused bf16 pass rounds.
        t.param = &u.master;
        t.master = &none;
        t.bf16_param = &u.param;
      }
      tensors.push_back(t);
    }
    if (Kernels* kern = kernels_for(device)) kern->adamw_multi_step(current_stream(device), tensors);
  }
}

void AdamW::step(double lr) {
  check_lr(lr);
  OpScope op("adamw");
  NoGradGuard no_grad;
  std::vector<Update> updates;
  updates.reserve(slots_.size());
  for (Slot& s : slots_) {
    Tensor g = begin_update(s);
    if (g.defined()) updates.push_back({&s, s.param, std::move(g), s.exp_avg, s.exp_avg_sq, s.master});
  }
  update(updates, lr);
  ++steps_;
}

void AdamW::zero_grad() const {
  for (const Slot& s : slots_) s.param.zero_grad();
}

const AdamW::Slot& AdamW::find(const std::string& name) const {
  for (const Slot& s : slots_)
    if (s.name == name) return s;
  detail::throw_error(detail::str_cat("[adamw] no parameter named '", name, "'"));
}

bool AdamW::decays(const std::string& name) const { return find(name).decay; }
int64_t AdamW::param_steps(const std::string& name) const { return find(name).step; }

int64_t AdamW::state_bytes() const {
  int64_t n = 0;
  for (const Slot& s : slots_)
    for (const Tensor* t : {&s.exp_avg, &s.exp_avg_sq, &s.master})
      if (t->defined()) n += t->nbytes();
  return n;
}

std::string AdamW::describe() const { return "on the device"; }

nlohmann::json AdamW::stats_json() const { return nullptr; }

std::map<std::string, Tensor> AdamW::state_dict() const {
  std::map<std::string, Tensor> out;
  for (const Slot& s : slots_) {
    if (s.step == 0) continue;
    out[s.name + ".exp_avg"] = s.exp_avg;
    out[s.name + ".exp_avg_sq"] = s.exp_avg_sq;
    if (s.master.defined()) out[s.name + ".master"] = s.master;
    out[s.name + ".step"] = from_vector_i64({s.step}, Shape{});
  }
  out["step"] = from_vector_i64({steps_}, Shape{});
  return out;
}

namespace {

int64_t read_count(const std::map<std::string, Tensor>& state, const std::string& key) {
  auto it = state.find(key);
  TIDAL_CHECK(it != state.end(), "[adamw] load_state_dict: the state lacks '", key, "'");
  const Tensor& t = it->second;
  TIDAL_CHECK(t.numel() == 1 && is_integral(t.dtype()), "[adamw] load_state_dict: '", key,
              "' must be one integer, got ", t.dtype(), " ", t.shape());
  const int64_t v = t.to(DType::i64).item<int64_t>();
  TIDAL_CHECK(v >= 0, "[adamw] load_state_dict: '", key, "' is negative (", v, ")");
  return v;
}

}  // namespace

void AdamW::load_state_dict(const std::map<std::string, Tensor>& state) {
  // Validate everything before changing anything, so a bad checkpoint leaves the optimizer intact.
  std::set<std::string> known{"step"};
  for (const Slot& s : slots_)
    for (const char* suffix : {".exp_avg", ".exp_avg_sq", ".master", ".step"}) known.insert(s.name + suffix);
  for (const auto& [key, t] : state)
    TIDAL_CHECK(known.count(key), "[adamw] load_state_dict: '", key,
                "' belongs to no parameter of this optimizer (is the model the same?)");
  const int64_t steps = read_count(state, "step");
  std::vector<int64_t> counts(slots_.size(), 0);
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (!state.count(s.name + ".step")) {
      TIDAL_CHECK(!state.count(s.name + ".exp_avg") && !state.count(s.name + ".exp_avg_sq"),
                  "[adamw] load_state_dict: '", s.name, "' has moments but no step count");
      continue;
    }
    counts[i] = read_count(state, s.name + ".step");
    const DType want = s.param.dtype() == DType::f64 ? DType::f64 : DType::f32;
    std::vector<std::string> keys = {".exp_avg", ".exp_avg_sq"};
    if (s.param.dtype() == DType::bf16) keys.push_back(".master");
    for (const std::string& suffix : keys) {
      auto it = state.find(s.name + suffix);
      TIDAL_CHECK(it != state.end(), "[adamw] load_state_dict: the state lacks '", s.name + suffix, "'");
      TIDAL_CHECK(it->second.shape() == s.param.shape() && it->second.dtype() == want, "[adamw] load_state_dict: '",
                  s.name + suffix, "' is ", it->second.dtype(), " ", it->second.shape(), " but the parameter needs ",
                  want, " ", s.param.shape());
      TIDAL_CHECK(s.param.is_meta() || !it->second.is_meta(), "[adamw] load_state_dict: '", s.name + suffix,
                  "' is a meta tensor (no values) but the parameter is on ", s.param.device());
    }
  }
  NoGradGuard no_grad;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    s.step = counts[i];
    s.exp_avg = s.exp_avg_sq = s.master = Tensor();
    if (s.step == 0) continue;
    init_state(s);
    for (Tensor* t : {&s.exp_avg, &s.exp_avg_sq, &s.master}) {
      if (!t->defined() || t->is_meta()) continue;
      const std::string suffix = t == &s.exp_avg ? ".exp_avg" : t == &s.exp_avg_sq ? ".exp_avg_sq" : ".master";
      t->copy_(state.at(s.name + suffix).to(t->device()));  // a file's host tensor onto the state's device
    }
  }
  steps_ = steps;
}

}  // namespace tidal::optim
