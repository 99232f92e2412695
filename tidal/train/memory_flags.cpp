#include "tidal/train/memory_flags.h"

#include <sstream>

#include "tidal/base/error.h"
#include "tidal/memory_stats.h"

namespace tidal::train {
namespace {

constexpr int64_t kBig = int64_t(1) << 40;
using memory::Granularity;
using memory::RecomputeMethod;
using memory::RecomputeModule;

// The value of option `flag` among `values` (by their name()), or `fallback` when it is not given.
template <class E>
E choice(const Flags& f, const std::string& flag, std::initializer_list<E> values, E fallback, const char* valid) {
  if (!f.has(flag)) return fallback;
  const std::string v = f.str(flag);
  for (const E e : values)
    if (v == memory::name(e)) return e;
  TIDAL_CHECK(false, "tidal train: --", flag, " must be ", valid, ", got '", v, "'");
  return fallback;
}

std::vector<RecomputeModule> parse_modules(const std::string& list) {
  std::vector<RecomputeModule> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item.empty()) continue;
    bool known = false;
    for (const RecomputeModule m : memory::kRecomputeModules)
      if (item == memory::name(m)) {
        out.push_back(m);
        known = true;
      }
    TIDAL_CHECK(known, "--recompute-modules: unknown module '", item,
                "'; valid are core_attn, mlp, norm, moe_act, moe, mla_up_proj");
  }
  return out;
}

memory::RecomputeConfig parse_recompute(const Flags& f) {
  memory::RecomputeConfig c;
  c.granularity = choice(f, "recompute-granularity", {Granularity::full, Granularity::selective}, Granularity::none,
                         "full or selective");
  c.method = choice(f, "recompute-method", {RecomputeMethod::uniform, RecomputeMethod::block}, RecomputeMethod::none,
                    "uniform or block");
  c.num_layers = f.integer("recompute-num-layers", -1, 0, kBig);
  c.modules = parse_modules(f.str("recompute-modules"));
  if (!c.modules.empty() && c.granularity == Granularity::none) c.granularity = Granularity::selective;  // implied
  if (c.granularity == Granularity::selective && c.modules.empty()) c.modules = {RecomputeModule::core_attn};
  c.activation_function = f.flag_on("recompute-activation-function");
  c.activation_num_layers = f.integer("recompute-activation-function-num-layers", -1, 0, kBig);
  c.norm = f.flag_on("recompute-norm");
  c.norm_num_layers = f.integer("recompute-norm-num-layers", -1, 0, kBig);
  c.csa_attention = f.flag_on("recompute-csa-attention");
  c.mhc = f.flag_on("mhc-recompute");
  return c;
}

// What the offload policy needs of the recompute: something left to offload.
void check_offload_policy(const memory::OffloadConfig& c, const std::vector<memory::LayerRecompute>& plan,
                          const memory::RecomputeConfig& recompute) {
  if (!c.enabled || c.policy.kind != memory::OffloadPolicyKind::core_attn) return;
  for (const memory::LayerRecompute& p : plan)
    TIDAL_CHECK(!p.full && !p.core_attn && !p.csa_attention,
                "tidal train: --offload-policy core-attn has nothing to offload where the "
                "attention core is recomputed (",
                recompute.describe(), "); use layer-input, or drop the recompute");
}

memory::OffloadConfig parse_offload(const Flags& f, const std::vector<memory::LayerRecompute>& plan,
                                    const memory::RecomputeConfig& recompute) {
  memory::OffloadConfig c;
  c.enabled = f.flag_on("activation-offload");
  for (const char* flag :
       {"offload-policy", "offload-target", "offload-dir", "offload-prefetch-depth", "offload-host-limit"})
    TIDAL_CHECK(c.enabled || !f.has(flag), "tidal train: --", flag, " needs --activation-offload");
  if (f.has("offload-policy")) c.policy = memory::parse_offload_policy(f.str("offload-policy"));
  c.target = choice(f, "offload-target", {memory::OffloadTarget::host, memory::OffloadTarget::disk},
                    memory::OffloadTarget::host, "host or disk");
  const bool disk = c.target == memory::OffloadTarget::disk;
  c.dir = f.str("offload-dir");
  TIDAL_CHECK(!disk || !c.dir.empty(),
              "tidal train: --offload-target disk needs --offload-dir PATH (where the spill file goes)");
  TIDAL_CHECK(disk || c.dir.empty(), "tidal train: --offload-dir is for --offload-target disk");
  c.prefetch_depth = f.integer("offload-prefetch-depth", c.prefetch_depth, 0, 1 << 20);
  if (f.has("offload-host-limit")) c.host_limit = parse_bytes(f.str("offload-host-limit"));
  TIDAL_CHECK(c.host_limit == 0 || !disk, "tidal train: --offload-host-limit is for --offload-target host");
  check_offload_policy(c, plan, recompute);
  return c;
}

memory::LossComputeConfig parse_loss(const Flags& f) {
  memory::LossComputeConfig c;
  const std::string mode = f.str("loss-compute-mode");
  TIDAL_CHECK(mode.empty() || mode == "default" || mode == "chunk",
              "tidal train: --loss-compute-mode must be default or chunk, got '", mode, "'");
  c.chunked = mode == "chunk";
  if (f.has("loss-chunk-size")) {
    const int64_t n = f.integer("loss-chunk-size", 0, -kBig, kBig);
    TIDAL_CHECK(c.chunked, "tidal train: --loss-chunk-size needs --loss-compute-mode chunk (the default mode ",
                "computes all logits at once)");
    TIDAL_CHECK(n >= 1, "tidal train: --loss-chunk-size must be >= 1 tokens, got ", n);
    c.chunk_size = n;
  }
  return c;
}

memory::SwapOptimizerConfig parse_swap(const Flags& f) {
  memory::SwapOptimizerConfig c;
  c.on = f.flag_on("swap-optimizer");
  if (f.has("swap-optimizer-times")) {
    const int64_t k = f.integer("swap-optimizer-times", 0, -kBig, kBig);
    TIDAL_CHECK(c.on, "tidal train: --swap-optimizer-times needs --swap-optimizer");
    TIDAL_CHECK(k >= 1, "tidal train: --swap-optimizer-times must be >= 1 (the number of windows the step ",
                "runs in), got ", k);
    c.times = k;
  }
  return c;
}

}  // namespace

Flags& add_memory_flags(Flags& f) {
  return f.option("recompute-granularity", "full or selective activation recompute (docs/recompute.md)", "G")
      .option("recompute-method", "with full: uniform (groups of N layers) or block (the first N layers)", "M")
      .option("recompute-num-layers", "N for --recompute-method", "N")
      .flag("recompute-activation-function", "free MLP activation outputs, recompute them in backward")
      .option("recompute-activation-function-num-layers", "how many layers (default: all)", "N")
      .flag("recompute-norm", "free norm outputs, recompute them in backward")
      .option("recompute-norm-num-layers", "how many layers (default: all)", "N")
      .option("recompute-modules", "selective recompute of core_attn,mlp,norm,moe_act,moe,mla_up_proj", "LIST")
      .flag("recompute-csa-attention",
            "DeepSeek-V4: recompute each compressed layer's compressor, indexer (its top-k replayed) and attention "
            "in backward, keeping their inputs only (CSA and HCA layers)")
      .flag("mhc-recompute",
            "DeepSeek-V4: recompute the mHC mappings (the attention's pre and post, the MLP's pre) in backward "
            "instead of keeping their Sinkhorn and norm intermediates and the mid-layer streams")
      .flag("activation-offload", "offload saved activations to host (or disk) during forward (docs/offload.md)")
      .option("offload-policy", "layer-input, core-attn, all (default) or min-bytes=N", "POLICY")
      .option("offload-target", "host (default) or disk", "TARGET")
      .option("offload-dir", "directory of the spill file for --offload-target disk (created if missing)", "DIR")
      .option("offload-prefetch-depth", "blocks prefetched ahead in backward (default 1)", "K")
      .option("offload-host-limit", "cap on host memory for offloaded activations, e.g. 4GiB", "BYTES")
      .option("loss-compute-mode", "default (all logits at once) or chunk (the LM head and loss by chunks of tokens)",
              "MODE")
      .option("loss-chunk-size", "tokens per chunk with --loss-compute-mode chunk (default 1024)", "N")
      .flag("swap-optimizer", "keep AdamW's states in host memory, swap them in and out in windows at each step")
      .option("swap-optimizer-times", "windows per step with --swap-optimizer (default 16)", "K");
}

memory::MemoryConfig parse_memory_config(const Flags& f, const models::ModelConfig& model) {
  memory::MemoryConfig c;
  c.set_recompute(parse_recompute(f), model);
  c.offload = parse_offload(f, c.recompute_plan, c.recompute);
  c.loss = parse_loss(f);
  c.swap_optimizer = parse_swap(f);
  return c;
}

void validate_memory_config(memory::MemoryConfig& c, const models::ModelConfig& model) {
  c.set_recompute(c.recompute, model);
  check_offload_policy(c.offload, c.recompute_plan, c.recompute);
  TIDAL_CHECK(!c.loss.chunked || c.loss.chunk_size >= 1, "tidal train: --loss-chunk-size must be >= 1 tokens, got ",
              c.loss.chunk_size);
  TIDAL_CHECK(c.swap_optimizer.times == -1 || (c.swap_optimizer.on && c.swap_optimizer.times >= 1),
              "tidal train: --swap-optimizer-times must be >= 1 with --swap-optimizer, got ", c.swap_optimizer.times);
}

memory::MemoryConfig parse_memory_config(const std::vector<std::string>& argv, const models::ModelConfig& model) {
  Flags f("train");
  add_memory_flags(f).parse(argv);
  return parse_memory_config(f, model);
}

std::vector<std::string> memory_config_flags(const memory::MemoryConfig& c) {
  std::vector<std::string> out;
  auto add = [&](std::initializer_list<std::string> words) { out.insert(out.end(), words); };
  const memory::RecomputeConfig& r = c.recompute;
  if (r.granularity == Granularity::selective) {
    const std::string modules = memory::module_list(r.modules);
    if (modules.empty() || modules == "core_attn")
      add({"--recompute-granularity", "selective"});
    else
      add({"--recompute-modules", modules});  // implies selective
  } else if (r.granularity == Granularity::full) {
    add({"--recompute-granularity", "full"});
  }
  if (r.method != RecomputeMethod::none) add({"--recompute-method", memory::name(r.method)});
  if (r.num_layers >= 0) add({"--recompute-num-layers", std::to_string(r.num_layers)});
  if (r.activation_function) add({"--recompute-activation-function"});
  if (r.activation_num_layers >= 0)
    add({"--recompute-activation-function-num-layers", std::to_string(r.activation_num_layers)});
  if (r.norm) add({"--recompute-norm"});
  if (r.norm_num_layers >= 0) add({"--recompute-norm-num-layers", std::to_string(r.norm_num_layers)});
  if (r.csa_attention) add({"--recompute-csa-attention"});
  if (r.mhc) add({"--mhc-recompute"});

  const memory::OffloadConfig& o = c.offload;
  if (o.enabled) {
    add({"--activation-offload", "--offload-policy", memory::name(o.policy)});
    if (o.target != memory::OffloadTarget::host) add({"--offload-target", memory::name(o.target)});
    if (!o.dir.empty()) add({"--offload-dir", o.dir});
    if (o.prefetch_depth != 1) add({"--offload-prefetch-depth", std::to_string(o.prefetch_depth)});
    if (o.host_limit != 0) add({"--offload-host-limit", std::to_string(o.host_limit)});
  }
  if (c.loss.chunked) add({"--loss-compute-mode", "chunk", "--loss-chunk-size", std::to_string(c.loss.chunk_size)});
  if (c.swap_optimizer.on) add({"--swap-optimizer"});
  if (c.swap_optimizer.times >= 0) add({"--swap-optimizer-times", std::to_string(c.swap_optimizer.times)});
  return out;
}

std::string join_flags(const std::vector<std::string>& words) {
  std::string s;
  for (const std::string& w : words) {
    s += s.empty() ? "" : " ";
    s += w.find(' ') == std::string::npos && !w.empty() ? w : "'" + w + "'";
  }
  return s;
}

}  // namespace tidal::train
