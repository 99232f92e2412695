"""The PyTorch side of bench/compare_torch.sh: a GPT-2 of the same shape as tidal's preset, trained
on seeded random tokens with the same AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on the
matrices only, gradient clipping at 1.0) and no dropout, in fp32 or under bf16 autocast.

Recompute modes, as tidal names them (docs/recompute.md):
  none       nothing recomputed
  selective  core attention recomputed (Megatron's selective: softmax(QK^T)V of every layer)
  full       every layer recomputed (--recompute-granularity full --recompute-method uniform
             --recompute-num-layers 1)
  act        the MLP activation recomputed (--recompute-activation-function)
torch.utils.checkpoint does them all (non-reentrant). Prints one JSON line: the median step time in
ms over the timed steps, tokens/s and the process's peak RSS.

Works with Debian's torch 1.13 (no scaled_dot_product_attention there: attention is written out,
with the causal mask) and PyTorch 2.x (F.scaled_dot_product_attention, causal).
"""
import argparse
import json
import math
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def ckpt(fn, *args):
    try:
        return checkpoint(fn, *args, use_reentrant=False)
    except TypeError:  # torch < 1.11 has no use_reentrant
        return checkpoint(fn, *args)


def attention_core(q, k, v):  # (B, H, T, D) each
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.size(-2)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(mask, float("-inf")).softmax(-1) @ v


def gelu_tanh(z):  # GPT-2's gelu_new
    return F.gelu(z, approximate="tanh")


class Block(nn.Module):
    def __init__(self, d, heads, mode):
        super().__init__()
        self.heads, self.mode = heads, mode
        self.ln_1, self.ln_2 = nn.LayerNorm(d, eps=1e-5), nn.LayerNorm(d, eps=1e-5)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attn(self, x):  # (B, T, d)
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = ckpt(attention_core, q, k, v) if self.mode == "selective" else attention_core(q, k, v)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))

    def mlp(self, x):
        h = self.c_fc(x)
        a = ckpt(gelu_tanh, h) if self.mode == "act" else gelu_tanh(h)
        return self.mlp_proj(a)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, vocab, d, layers, heads, positions, mode):
        super().__init__()
        self.mode = mode
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(positions, d)
        self.h = nn.ModuleList(Block(d, heads, mode) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.h:
            x = ckpt(block, x) if self.mode == "full" else block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--positions", type=int, default=1024)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out of the median")
    ap.add_argument("--mode", choices=["none", "selective", "full", "act"], default="none")
    ap.add_argument("--bf16", action="store_true", help="torch.autocast(device, dtype=torch.bfloat16)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda (scripts/gpu_check.sh)")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model (PyTorch 2.x; its compilation falls in the first, warm-up steps)")
    a = ap.parse_args()
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"

    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    model = GPT2(a.vocab, a.hidden, a.layers, a.heads, a.positions, a.mode).to(dev)
    step_model = torch.compile(model) if a.compile else model
    decay = [p for n, p in model.named_parameters() if p.dim() > 1]
    rest = [p for n, p in model.named_parameters() if p.dim() <= 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(1234)
    times = []
    for step in range(a.steps):
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen).to(dev)
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.bf16):
            loss = step_model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    ms = statistics.median(times[a.warmup:] if len(times) > a.warmup else times)
    print(json.dumps({"torch": torch.__version__, "median_step_ms": ms, "tokens_per_s": a.batch * a.seq / ms * 1e3,
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "loss": float(loss.detach()), "params": sum(p.numel() for p in model.parameters()),
                      "device": str(dev),
                      "peak_device_bytes": torch.cuda.max_memory_allocated() if cuda else 0}))


if __name__ == "__main__":
    main()
