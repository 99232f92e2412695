// `tidal demo`: a tiny Llama-style transformer (RMSNorm, RoPE, grouped-query flash attention,
// SwiGLU, tied embeddings) trained with AdamW on generated text using the engine core alone; then
// one step measured with and without activation checkpointing, and a sample of what it learned.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "tidal/autograd/checkpoint.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/base/philox.h"
#include "tidal/memory_scope.h"
#include "tidal/ops/activation.h"
#include "tidal/ops/attention.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/embedding.h"
#include "tidal/ops/loss.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/norm.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/rope.h"
#include "tidal/ops/view.h"
#include "tools/tidal/cli.h"

namespace tidal::cli {
namespace {

struct Config {
  int64_t layers = 4, dim = 128, heads = 4, kv_heads = 2, ffn = 256, seq = 128, batch = 16, steps = 300;
  int64_t log_every = 25;
  double lr = 3e-3;
  uint64_t seed = 1;
  bool checkpoint = false;
  AttentionKernel attention = AttentionKernel::flash;
};

// Sentences from a small grammar, deterministic in the seed: enough structure to learn quickly.
std::string generate_text(uint64_t seed, int64_t chars) {
  const std::vector<std::vector<std::string>> parts = {
      {"the", "a", "every", "no", "one"},
      {"quick", "lazy", "small", "old", "bright", "quiet", "brave"},
      {"fox", "dog", "cat", "bird", "river", "ship", "king", "storm"},
      {"sees", "follows", "finds", "carries", "remembers", "watches", "leaves"},
      {"the", "a", "its", "that"},
      {"moon", "stone", "garden", "road", "shadow", "letter", "sea", "song"},
  };
  std::string text;
  uint64_t pos = 0;
  while (int64_t(text.size()) < chars) {
    for (size_t p = 0; p < parts.size(); ++p) {
      const uint32_t r = philox4x32(pos++, seed)[0];
      if (p > 0) text += ' ';
      text += parts[p][r % parts[p].size()];
    }
    text += (philox4x32(pos++, seed)[1] % 3 == 0) ? ".\n" : ". ";
  }
  return text;
}

struct Layer {
  Tensor attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;
};

struct Model {
  Config cfg;
  int64_t vocab = 0;
  Tensor embed, norm;  // the LM head is tied to the embedding
  std::vector<Layer> layers;

  std::vector<Tensor> params() const {
    std::vector<Tensor> all = {embed, norm};
    for (const Layer& l : layers)
      for (const Tensor& t : {l.attn_norm, l.wq, l.wk, l.wv, l.wo, l.mlp_norm, l.w_gate, l.w_up, l.w_down})
        all.push_back(t);
    return all;
  }
};

Model init_model(const Config& c, int64_t vocab) {
  MemoryScope scope(MemoryCategory::parameter);
  manual_seed(c.seed);
  auto normal = [](Shape shape, double stdv) { return mul(randn(shape), stdv).set_requires_grad(true); };
  auto ones_param = [](int64_t n) { return ones({n}).set_requires_grad(true); };
  const int64_t hd = c.dim / c.heads;
  const double out_std = 0.02 / std::sqrt(2.0 * double(c.layers));
  Model m{c, vocab, normal({vocab, c.dim}, 0.02), ones_param(c.dim), {}};
  for (int64_t l = 0; l < c.layers; ++l)
    m.layers.push_back({ones_param(c.dim), normal({c.heads * hd, c.dim}, 0.02), normal({c.kv_heads * hd, c.dim}, 0.02),
                        normal({c.kv_heads * hd, c.dim}, 0.02), normal({c.dim, c.heads * hd}, out_std),
                        ones_param(c.dim), normal({c.ffn, c.dim}, 0.02), normal({c.ffn, c.dim}, 0.02),
                        normal({c.dim, c.ffn}, out_std)});
  return m;
}

// One pre-norm transformer layer. x (B, T, C) -> (B, T, C).
Tensor layer_forward(const Layer& p, const Tensor& x, const RopeTables& rope, const Config& c) {
  const int64_t b = x.size(0), t = x.size(1), hd = c.dim / c.heads;
  Tensor h = rms_norm(x, p.attn_norm);                                      // (B, T, C)
  Tensor q = linear(h, p.wq).view({b, t, c.heads, hd}).transpose(1, 2);     // (B, H, T, hd)
  Tensor k = linear(h, p.wk).view({b, t, c.kv_heads, hd}).transpose(1, 2);  // (B, Hkv, T, hd)
  Tensor v = linear(h, p.wv).view({b, t, c.kv_heads, hd}).transpose(1, 2);  // (B, Hkv, T, hd)
  AttentionOptions opt;
  opt.kernel = c.attention;
  Tensor a = scaled_dot_product_attention(apply_rope(q, rope.cos, rope.sin), apply_rope(k, rope.cos, rope.sin), v,
                                          opt);                                       // (B, H, T, hd)
  Tensor x1 = add(x, linear(a.transpose(1, 2).reshape({b, t, c.heads * hd}), p.wo));  // (B, T, C)
  Tensor m = rms_norm(x1, p.mlp_norm);                                                // (B, T, C)
  return add(x1, linear(swiglu(linear(m, p.w_gate), linear(m, p.w_up)), p.w_down));   // (B, T, C)
}

// Logits (B, T, V) of token ids (B, T).
Tensor forward(const Model& model, const Tensor& ids, bool checkpoint) {
  const Config& c = model.cfg;
  const RopeTables rope = rope_tables(ids.size(1), c.dim / c.heads, 10000.0);
  Tensor x = embedding(model.embed, ids);  // (B, T, C)
  for (size_t l = 0; l < model.layers.size(); ++l) {
    LayerScope scope{static_cast<int>(l)};
    const Layer p = model.layers[l];
    if (checkpoint)
      x = autograd::checkpoint([p, rope, c](const Tensor& h) { return layer_forward(p, h, rope, c); }, x);
    else
      x = layer_forward(p, x, rope, c);
  }
  x = rms_norm(x, model.norm);
  MemoryScope logits(MemoryCategory::logits);
  return linear(x, model.embed);  // (B, T, V)
}

// Mean cross-entropy of predicting tokens[:, 1:] from tokens[:, :-1]; tokens (B, T + 1).
Tensor loss_of(const Model& model, const Tensor& tokens, bool checkpoint) {
  const int64_t b = tokens.size(0), t = tokens.size(1) - 1;
  Tensor logits = forward(model, tokens.narrow(1, 0, t), checkpoint);
  return cross_entropy(logits.reshape({b * t, model.vocab}), tokens.narrow(1, 1, t).reshape({b * t}));
}

struct AdamW {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.01;
  int64_t step_count = 0;
  std::vector<Tensor> m, v;

  void step(const std::vector<Tensor>& params) {
    NoGradGuard no_grad;
    if (m.empty()) {
      MemoryScope scope(MemoryCategory::optimizer_state);
      for (const Tensor& p : params) {
        m.push_back(zeros_like(p));
        v.push_back(zeros_like(p));
      }
    }
    ++step_count;
    const double c1 = 1.0 - std::pow(beta1, double(step_count)), c2 = 1.0 - std::pow(beta2, double(step_count));
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor g = params[i].grad();
      if (!g.defined()) continue;
      m[i].mul_(beta1).add_(g, 1.0 - beta1);
      v[i].mul_(beta2).add_(square(g), 1.0 - beta2);
      Tensor p = params[i].detach();
      p.mul_(1.0 - lr * weight_decay);
      p.add_(div(m[i], add(sqrt(div(v[i], c2)), eps)), -lr / c1);
    }
  }
};

struct Corpus {
  std::string text;
  std::string chars;       // id -> char
  std::vector<int> index;  // char -> id
  std::vector<int64_t> ids;

  explicit Corpus(std::string t) : text(std::move(t)), index(256, -1) {
    for (unsigned char ch : text)
      if (index[ch] < 0) {
        index[ch] = int(chars.size());
        chars += char(ch);
      }
    for (unsigned char ch : text) ids.push_back(index[ch]);
  }
  // Random windows of t + 1 tokens: (B, T + 1).
  Tensor batch(int64_t b, int64_t t) const {
    Tensor starts = randint(0, int64_t(ids.size()) - t - 1, {b});
    std::vector<int64_t> out;
    for (int64_t s : starts.to_vector<int64_t>()) out.insert(out.end(), ids.begin() + s, ids.begin() + s + t + 1);
    return from_vector_i64(out, {b, t + 1});
  }
};

std::string sample(const Model& model, const Corpus& corpus, const std::string& prompt, int64_t n) {
  NoGradGuard no_grad;
  std::vector<int64_t> ids;
  for (unsigned char ch : prompt) ids.push_back(std::max(0, corpus.index[ch]));
  std::string out = prompt;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = std::min<int64_t>(int64_t(ids.size()), model.cfg.seq);
    std::vector<int64_t> window(ids.end() - t, ids.end());
    Tensor logits = forward(model, from_vector_i64(window, {1, t}), false);  // (1, t, V)
    const int64_t next = max(logits.select(1, t - 1).squeeze(0), 0).indices.item<int64_t>();
    ids.push_back(next);
    out += corpus.chars[size_t(next)];
  }
  return out;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int run_demo(const std::vector<std::string>& argv) {
  Config c;
  Flags args("demo");
  args.option("steps", "training steps (default " + std::to_string(c.steps) + ")", "N")
      .option("layers", "transformer layers (default " + std::to_string(c.layers) + ")", "N")
      .option("dim", "hidden size (default " + std::to_string(c.dim) + ")", "N")
      .option("heads", "attention heads (default " + std::to_string(c.heads) + ")", "N")
      .option("kv-heads", "key/value heads (default " + std::to_string(c.kv_heads) + ")", "N")
      .option("ffn", "SwiGLU hidden size (default " + std::to_string(c.ffn) + ")", "N")
      .option("seq-length", "tokens per sample (default " + std::to_string(c.seq) + ")", "N")
      .option("batch", "samples per step (default " + std::to_string(c.batch) + ")", "N")
      .option("lr", "AdamW learning rate (default 3e-3)", "LR")
      .option("seed", "random seed of the text, the weights and the batches (default 1)", "N")
      .option("log-interval", "print a line every N steps (default " + std::to_string(c.log_every) + ")", "N")
      .option("attention", "attention kernel: flash (default) or eager", "KIND")
      .flag("checkpoint", "train with activation checkpointing of every layer");
  if (parse_or_help(args, argv, "[options]")) return kOk;
  c.steps = args.integer("steps", c.steps, 0, 1000000);
  c.layers = args.integer("layers", c.layers, 1, 64);
  c.heads = args.integer("heads", c.heads, 1, 64);
  c.kv_heads = args.integer("kv-heads", c.kv_heads, 1, c.heads);
  c.dim = args.integer("dim", c.dim, 2 * c.heads, 8192);
  c.ffn = args.integer("ffn", c.ffn, 1, 65536);
  c.seq = args.integer("seq-length", c.seq, 2, 65536);
  c.batch = args.integer("batch", c.batch, 1, 65536);
  c.lr = args.number("lr", c.lr, 0.0, 1.0);
  c.seed = uint64_t(args.integer("seed", int64_t(c.seed), 0, int64_t(1) << 62));
  c.log_every = args.integer("log-interval", c.log_every, 1, 1000000);
  c.checkpoint = args.flag_on("checkpoint");
  const std::string attention = args.str("attention", "flash");
  TIDAL_CHECK(attention == "flash" || attention == "eager", "tidal demo: --attention must be flash or eager, got '",
              attention, "'");
  c.attention = attention == "flash" ? AttentionKernel::flash : AttentionKernel::eager;
  TIDAL_CHECK(c.heads % c.kv_heads == 0, "tidal demo: --heads ", c.heads, " must be a multiple of --kv-heads ",
              c.kv_heads);
  TIDAL_CHECK(c.dim % c.heads == 0 && (c.dim / c.heads) % 2 == 0, "tidal demo: --dim ", c.dim,
              " must split into --heads ", c.heads, " heads of even size");

  const Corpus corpus(generate_text(c.seed, 400000));
  Model model = init_model(c, int64_t(corpus.chars.size()));
  AdamW opt;
  opt.lr = c.lr;
  int64_t n_params = 0;
  for (const Tensor& p : model.params()) n_params += p.numel();
  std::printf(
      "tidal demo: %lld-layer transformer (dim %lld, %lld heads, %lld kv heads, %s attention), %lld "
      "parameters, vocabulary %lld characters of generated text\n",
      (long long)c.layers, (long long)c.dim, (long long)c.heads, (long long)c.kv_heads, attention.c_str(),
      (long long)n_params, (long long)model.vocab);
  std::printf("training %lld steps of %lld x %lld tokens%s\n", (long long)c.steps, (long long)c.batch, (long long)c.seq,
              c.checkpoint ? " with activation checkpointing" : "");

  Allocator& dev = device_allocator(Device::cpu());
  double t0 = now_s();
  for (int64_t step = 1; step <= c.steps; ++step) {
    Tensor loss = loss_of(model, corpus.batch(c.batch, c.seq), c.checkpoint);
    loss.backward();
    opt.step(model.params());
    for (const Tensor& p : model.params()) p.zero_grad();
    if (step % c.log_every == 0 || step == c.steps) {
      const double dt = (now_s() - t0) / double(step % c.log_every == 0 ? c.log_every : step % c.log_every);
      const MemoryStats s = dev.stats();
      std::printf("  step %5lld  loss %.4f  %7.1f ms/step  %8.0f tokens/s  peak %s\n", (long long)step,
                  loss.item<double>(), dt * 1e3, double(c.batch * c.seq) / dt, format_bytes(s.peak_allocated).c_str());
      std::fflush(stdout);
      t0 = now_s();
    }
  }

  // One step each way from the same weights and batch: the memory checkpointing saves, and the
  // proof that it changes nothing else.
  const RngState rng = get_rng_state();
  const Tensor batch = corpus.batch(c.batch, c.seq);
  int64_t peak[2] = {0, 0};
  double losses[2] = {0, 0};
  std::vector<Tensor> grads[2];
  for (int mode = 0; mode < 2; ++mode) {
    set_rng_state(rng);
    const int64_t base = dev.stats()[MemoryCategory::activation].allocated;
    dev.reset_peak_stats();
    Tensor loss = loss_of(model, batch, mode == 1);
    loss.backward();
    peak[mode] = dev.stats()[MemoryCategory::activation].peak - base;
    losses[mode] = loss.item<double>();
    for (const Tensor& p : model.params()) {
      grads[mode].push_back(p.grad());
      p.zero_grad();
    }
  }
  bool identical = losses[0] == losses[1];
  for (size_t i = 0; i < grads[0].size(); ++i) {
    const std::vector<float> a = grads[0][i].to_vector<float>(), b = grads[1][i].to_vector<float>();
    identical = identical && a == b;
  }
  std::printf("\nactivation checkpointing, one step of %lld x %lld tokens:\n", (long long)c.batch, (long long)c.seq);
  std::printf("  %-22s %18s %10s\n", "", "peak activations", "loss");
  std::printf("  %-22s %18s %10.6f\n", "keep every activation", format_bytes(peak[0]).c_str(), losses[0]);
  std::printf("  %-22s %18s %10.6f   gradients %s\n", "checkpoint each layer", format_bytes(peak[1]).c_str(), losses[1],
              identical ? "bitwise identical" : "DIFFER");
  std::printf("\nsample: %s\n", sample(model, corpus, "the ", 100).c_str());
  return identical ? kOk : kError;
}

}  // namespace tidal::cli
