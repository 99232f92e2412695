#!/usr/bin/python3
"""PyTorch reference for tidal's models (see docs/parity.md).

reference.py DIR reads what tidal_parity_dump wrote into DIR (config.json, weights.safetensors,
batch.safetensors, outputs.safetensors), rebuilds the model with its own PyTorch code written from the
Hugging Face modeling files' math (no transformers, no safetensors package: torch and numpy only),
and checks tidal's logits (flash and eager attention; and its --bf16 model's against this code run
under torch.autocast("cpu", dtype=torch.bfloat16), within bf16_tolerance), loss, MoE auxiliary loss and every gradient,
then the losses of 10 torch.optim.AdamW steps with clip_grad_norm_. Exits 1 with a report naming the
worst tensor and element on any failure.
"""
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

TOL = 1e-4          # max |a - b| / max |b| per tensor
# bf16 (tidal --bf16 against autocast here, and scripts/hf_interop.py against transformers): see
# bf16_tolerance.
BF16_U = 2.0**-8    # bf16's unit roundoff: 8 significant bits, round to nearest even
BF16_ROUNDINGS_PER_LAYER = 12
BF16_ROUNDINGS_OUTSIDE = 4
BF16_LAMBDA = 3.0
TRAIN_STEPS = 10
LR = 1e-3
WEIGHT_DECAY = 0.01
CLIP = 1.0


# --- safetensors: 8-byte little-endian header length, JSON header, raw little-endian data
def read_safetensors(path, metadata=None):
    """name -> torch tensor; fills `metadata` (a dict) with the header's __metadata__ when given."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            if metadata is not None:
                metadata.update(info)
            continue
        begin, end = info["data_offsets"]
        raw = data[base + begin:base + end]
        shape = tuple(info["shape"])
        dt = info["dtype"]
        if dt == "BF16":  # numpy has no bfloat16: widen the bits to f32 (exact)
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            np_type = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4", "U8": "u1", "BOOL": "u1"}[dt]
            arr = np.frombuffer(raw, dtype=np_type)
        out[name] = torch.from_numpy(arr.copy()).reshape(shape)
    return out


# --- the models, written from Hugging Face's modeling_gpt2.py / modeling_llama.py / modeling_qwen3(_moe).py
def conv1d(x, w, b):  # GPT-2's Conv1D: x @ W + b with W (in, out)
    size_out = x.shape[:-1] + (w.shape[1],)
    return torch.addmm(b, x.reshape(-1, x.shape[-1]), w).view(size_out)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def causal_mask(t, dtype):
    mask = torch.full((t, t), torch.finfo(dtype).min, dtype=dtype)
    return torch.triu(mask, diagonal=1)  # 0 on and below the diagonal


def gpt2_forward(P, c, ids):
    b, t = ids.shape
    d, heads = c["n_embd"], c["n_head"]
    hd = d // heads
    eps = c["layer_norm_epsilon"]
    x = F.embedding(ids, P["transformer.wte.weight"]) + F.embedding(torch.arange(t), P["transformer.wpe.weight"])
    keep = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for l in range(c["n_layer"]):
        p = f"transformer.h.{l}."
        h = F.layer_norm(x, (d,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps)
        q, k, v = conv1d(h, P[p + "attn.c_attn.weight"], P[p + "attn.c_attn.bias"]).split(d, dim=2)
        q, k, v = (y.view(b, t, heads, hd).permute(0, 2, 1, 3) for y in (q, k, v))  # (B, H, T, hd)
        w = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], v.size(-1) ** 0.5, dtype=q.dtype)
        w = torch.where(keep, w, torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype))
        a = torch.matmul(F.softmax(w, dim=-1), v)
        a = a.permute(0, 2, 1, 3).contiguous().view(b, t, d)
        x = x + conv1d(a, P[p + "attn.c_proj.weight"], P[p + "attn.c_proj.bias"])
        h = F.layer_norm(x, (d,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps)
        act = gelu_new if c["activation_function"] == "gelu_new" else F.gelu
        m = conv1d(act(conv1d(h, P[p + "mlp.c_fc.weight"], P[p + "mlp.c_fc.bias"])), P[p + "mlp.c_proj.weight"],
                   P[p + "mlp.c_proj.bias"])
        x = x + m
    x = F.layer_norm(x, (d,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], eps)
    return F.linear(x, P["transformer.wte.weight"]), []


def rms_norm(x, w, eps):  # LlamaRMSNorm / Qwen3RMSNorm
    dtype = x.dtype
    x = x.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    return w * x.to(dtype)


def rope(t, dim, theta):  # LlamaRotaryEmbedding (default rope_type)
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    pos = torch.arange(t, dtype=torch.int64).float()
    freqs = (inv_freq[None, :, None] @ pos[None, None, :]).transpose(1, 2)[0]  # (T, dim/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n_rep):
    b, kv, t, hd = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, kv, n_rep, t, hd).reshape(b, kv * n_rep, t, hd)


def swiglu_mlp(P, p, x):
    return F.linear(F.silu(F.linear(x, P[p + "gate_proj.weight"])) * F.linear(x, P[p + "up_proj.weight"]),
                    P[p + "down_proj.weight"])


def is_moe_layer(c, l):
    if c.get("num_experts", 0) <= 0 or l in c.get("mlp_only_layers", []):
        return False
    step = c.get("decoder_sparse_step", 1)
    return step > 0 and (l + 1) % step == 0


def sparse_moe(P, p, c, x):  # Qwen3MoeSparseMoeBlock
    b, t, d = x.shape
    h = x.view(-1, d)
    router_logits = F.linear(h, P[p + "gate.weight"])  # (N, E)
    routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
    routing_weights, selected = torch.topk(routing_weights, c["num_experts_per_tok"], dim=-1)
    if c.get("norm_topk_prob", False):
        routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
    routing_weights = routing_weights.to(h.dtype)
    out = torch.zeros((b * t, d), dtype=h.dtype)
    expert_mask = F.one_hot(selected, num_classes=c["num_experts"]).permute(2, 1, 0)  # (E, k, N)
    for e in range(c["num_experts"]):  # experts in index order
        idx, top_x = torch.where(expert_mask[e])
        if top_x.numel() == 0:
            continue
        y = swiglu_mlp(P, f"{p}experts.{e}.", h[None, top_x].reshape(-1, d)) * routing_weights[top_x, idx, None]
        out.index_add_(0, top_x, y.to(h.dtype))
    return out.view(b, t, d), router_logits


def load_balancing_loss(gate_logits, num_experts, top_k):  # HF load_balancing_loss_func, no attention mask
    logits = torch.cat(gate_logits, dim=0)
    routing_weights = F.softmax(logits, dim=-1)
    _, selected = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = F.one_hot(selected, num_experts)
    tokens_per_expert = torch.mean(expert_mask.float(), dim=0)
    router_prob_per_expert = torch.mean(routing_weights, dim=0)
    return torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * num_experts


def llama_forward(P, c, ids):
    b, t = ids.shape
    d, heads = c["hidden_size"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads", heads)
    hd = c.get("head_dim", d // heads)
    eps = c["rms_norm_eps"]
    qk_norm = c["model_type"] in ("qwen3", "qwen3_moe")
    bias = c.get("attention_bias", False)
    cos, sin = rope(t, hd, c["rope_theta"])
    mask = causal_mask(t, torch.float32)
    x = F.embedding(ids, P["model.embed_tokens.weight"])
    router_logits = []
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms_norm(x, P[p + "input_layernorm.weight"], eps)
        a = p + "self_attn."
        proj = lambda name, y: F.linear(y, P[a + name + ".weight"], P[a + name + ".bias"] if bias else None)
        q = proj("q_proj", h).view(b, t, heads, hd)
        k = proj("k_proj", h).view(b, t, kv, hd)
        v = proj("v_proj", h).view(b, t, kv, hd).transpose(1, 2)
        if qk_norm:  # on the head dim, before RoPE
            q = rms_norm(q, P[a + "q_norm.weight"], eps)
            k = rms_norm(k, P[a + "k_norm.weight"], eps)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, H, T, hd)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, heads // kv), repeat_kv(v, heads // kv)
        w = torch.matmul(q, k.transpose(2, 3)) * hd ** -0.5 + mask
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        o = torch.matmul(w, v).transpose(1, 2).contiguous().reshape(b, t, heads * hd)
        x = x + proj("o_proj", o)
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"], eps)
        if is_moe_layer(c, l):
            y, logits = sparse_moe(P, p + "mlp.", c, h)
            router_logits.append(logits)
        else:
            y = swiglu_mlp(P, p + "mlp.", h)
        x = x + y
    x = rms_norm(x, P["model.norm.weight"], eps)
    head = P["lm_head.weight"] if "lm_head.weight" in P else P["model.embed_tokens.weight"]
    return F.linear(x, head), router_logits


def forward_loss(P, c, tokens):
    ids, targets = tokens[:, :-1], tokens[:, 1:]
    fwd = gpt2_forward if c["model_type"] == "gpt2" else llama_forward
    logits, router_logits = fwd(P, c, ids)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
    aux = None
    if router_logits:
        aux = load_balancing_loss(router_logits, c["num_experts"], c["num_experts_per_tok"])
        loss = loss + c["router_aux_loss_coef"] * aux
    return logits, loss, aux


def bf16_tolerance(layers):
    """Relative tolerance (of max |reference|) for logits computed with bf16 activations by two
    implementations from the same weights: lambda * u * sqrt(n), n = 2 * (R * L + R0). Each side
    rounds what a layer hands on to bf16 at its own points, R = 12 per layer at most (norm out, q, k,
    v, attention out, o_proj out, residual add, norm out, gate, up, activation product, down out and
    the second residual add, the MLP's counted as one chain) and R0 = 4 outside the layers (embedding,
    final norm, lm_head out, the f32 conversion); each rounding is at most u = 2^-8 relative (bf16:
    8 significant bits, round to nearest even). In the worst case they add linearly (2 u (R L + R0):
    0.22 for two layers, loose enough to pass a swapped gate/up projection); rounding errors are
    close to independent and zero-mean, so the probabilistic bound of Higham & Mary (2019),
    lambda * sqrt(n) * u, holding with probability >= 1 - 2 exp(-lambda^2 / 2), is used with
    lambda = 3: 0.088 for two layers, 0.12 for four. It is a bound on the numerics only: weights
    and mapping are checked at f32's 1e-4 (scripts/hf_interop.py widens bf16 checkpoints to f32 for
    that). MoE: a rounding can flip a near-tied top-k choice, which is no bounded rounding error. In
    tiny-qwen3-moe's batch, position 19 has a router-logit gap of 5e-4 between its second and third
    expert, below bf16's rounding: tidal's bf16 model routes it to the other expert (that position's
    logits differ by 0.029 relative, the others' by <= 0.007), inside the bound here, but a flip
    need not be in general (docs/parity.md)."""
    return BF16_LAMBDA * BF16_U * math.sqrt(2 * (BF16_ROUNDINGS_PER_LAYER * layers + BF16_ROUNDINGS_OUTSIDE))


def num_layers(c):
    return c["n_layer"] if c["model_type"] == "gpt2" else c["num_hidden_layers"]


# --- comparison
class Report:
    def __init__(self, model):
        self.model = model
        self.failures = []
        self.worst = {}  # tensor class -> (error, name, tolerance)

    def check(self, name, got, want, cls, tol=TOL):
        got, want = got.detach().double(), want.detach().double()
        if got.shape != want.shape:
            self.failures.append(f"{name}: shape {tuple(got.shape)} from tidal but {tuple(want.shape)} from torch")
            return
        diff = (got - want).abs()
        scale = want.abs().max().item() if want.numel() else 0.0
        err = diff.max().item() / scale if scale > 0 else diff.max().item() if diff.numel() else 0.0
        if not math.isfinite(err):
            err = math.inf
        if err > self.worst.get(cls, (-1.0, "", tol))[0]:
            self.worst[cls] = (err, name, tol)
        if not err <= tol:
            i = int(diff.flatten().argmax())
            idx = tuple(int(v) for v in np.unravel_index(i, tuple(want.shape))) if want.dim() else ()
            self.failures.append(
                f"{name}: relative error {err:.3g} > {tol:g}; worst element {idx}: tidal {got.flatten()[i].item():.9g}"
                f" torch {want.flatten()[i].item():.9g} (max |torch| {scale:.4g}); first values tidal"
                f" {got.flatten()[:4].tolist()} torch {want.flatten()[:4].tolist()}")

    def fail(self, message):
        self.failures.append(message)


def no_decay_names(decays):
    return [n for n, d in decays.items() if not d]


def fresh_params(weights):
    return {n: t.clone().requires_grad_(True) for n, t in weights.items()}


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    d = sys.argv[1]
    torch.manual_seed(0)
    with open(f"{d}/config.json") as f:
        c = json.load(f)
    weights = read_safetensors(f"{d}/weights.safetensors")
    batch = read_safetensors(f"{d}/batch.safetensors")
    meta = {}
    tidal = read_safetensors(f"{d}/outputs.safetensors", meta)
    r = Report(c["model_type"])

    # One forward and backward on the initial weights.
    P = fresh_params(weights)
    logits, loss, aux = forward_loss(P, c, batch["tokens"])
    loss.backward()
    r.check("logits", tidal["logits"], logits, "logits")
    r.check("logits_eager", tidal["logits_eager"], logits, "logits_eager")
    if "logits_bf16" in tidal:  # tidal's --bf16 model (its weights: these rounded to bf16) against autocast
        fwd = gpt2_forward if c["model_type"] == "gpt2" else llama_forward
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            auto, _ = fwd(weights, c, batch["tokens"][:, :-1])
        r.check("logits_bf16", tidal["logits_bf16"], auto.float(), "logits_bf16", tol=bf16_tolerance(num_layers(c)))
    r.check("loss", tidal["loss"], loss, "loss")
    loss0 = loss.item()
    if aux is not None or "aux_loss" in tidal:
        if aux is None or "aux_loss" not in tidal:
            r.fail(f"aux_loss: tidal {'has' if 'aux_loss' in tidal else 'lacks'} one, torch "
                   f"{'lacks' if aux is None else 'has'} one")
        else:
            r.check("aux_loss", tidal["aux_loss"], aux, "aux_loss")
    for name, p in P.items():
        key = "grad." + name
        if p.grad is None or key not in tidal:
            if (p.grad is None) != (key not in tidal):
                r.fail(f"{key}: {'only tidal' if p.grad is None else 'only torch'} has a gradient")
            continue
        r.check(key, tidal[key], p.grad, "grad")
    extra = [k for k in tidal if k.startswith("grad.") and k[5:] not in P]
    if extra:
        r.fail(f"tidal has gradients of unknown parameters: {extra}")

    # The same AdamW run: two param groups (Megatron / HF: no decay for biases and 1-D parameters).
    P = fresh_params(weights)
    decays = {n: p.dim() > 1 and not n.endswith(".bias") for n, p in P.items()}
    decay = [p for n, p in P.items() if decays[n]]
    no_decay = [p for n, p in P.items() if not decays[n]]
    tidal_no_decay = set(filter(None, meta.get("no_decay", "").split(",")))
    if tidal_no_decay != {n for n in P if not decays[n]}:
        r.fail(f"weight-decay groups differ: only tidal exempts {sorted(tidal_no_decay - set(no_decay_names(decays)))},"
               f" only torch exempts {sorted(set(no_decay_names(decays)) - tidal_no_decay)}")
    skipped = []
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=(0.9, 0.999), eps=1e-8)
    losses, norms = [], []
    for i in range(TRAIN_STEPS):
        opt.zero_grad(set_to_none=True)  # unrouted experts keep grad None and are skipped by the step
        _, loss, _ = forward_loss(P, c, batch[f"train.{i}"])
        loss.backward()
        skipped += [f"{i}:{n}" for n, p in P.items() if p.grad is None]
        norms.append(torch.nn.utils.clip_grad_norm_(list(P.values()), CLIP).item())
        losses.append(loss.item())
        opt.step()
    tidal_skipped = list(filter(None, meta.get("skipped", "").split(",")))
    if sorted(tidal_skipped) != sorted(skipped):
        r.fail(f"parameters without gradient differ: tidal {tidal_skipped}, torch {skipped}")
    r.check("train_losses", tidal["train_losses"], torch.tensor(losses, dtype=torch.float64), "train_losses")
    r.check("grad_norms", tidal["grad_norms"], torch.tensor(norms, dtype=torch.float64), "grad_norms")
    # The weights after 10 steps, for information: AdamW's m / sqrt(v) turns a 1e-6 difference of a
    # near-zero gradient into a different step of up to lr, so these are reported, not gated.
    final_err = max(((tidal["final." + n].double() - p.detach().double()).abs().max().item() /
                     p.detach().abs().max().item(), n) for n, p in P.items())

    print(f"{c['model_type']}: loss tidal {tidal['loss'].item():.7f} torch {loss0:.7f}; "
          f"10 AdamW steps: {', '.join(f'{x:.5f}' for x in losses)}")
    for cls, (err, name, tol) in sorted(r.worst.items()):
        print(f"  worst {cls:<13} {err:.3g}  ({name}{'' if tol == TOL else f', tolerance {tol:.3g}'})")
    if skipped:
        print(f"  AdamW skipped {len(skipped)} (step, parameter) pairs without gradient, as torch did")
    print(f"  final weights (not gated) worst {final_err[0]:.3g} ({final_err[1]})")
    if r.failures:
        print(f"PARITY FAILED for {c['model_type']} ({d}):")
        for f_ in r.failures:
            print("  " + f_)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
