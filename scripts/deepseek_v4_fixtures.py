#!/usr/bin/env python3
"""Writes the DeepSeek-V4 fixtures of tests/fixtures/hf/ from transformers' own classes (issue 30).

Run from the virtual environment of scripts/hf_fixtures.py (tests never need it: the fixtures are committed):

  /work/venv-hf/bin/python scripts/deepseek_v4_fixtures.py hc       # tests/fixtures/hf/deepseek_v4_hc/
  /work/venv-hf/bin/python scripts/deepseek_v4_fixtures.py fields   # tests/fixtures/hf/deepseek_v4_fields.v5.json
  /work/venv-hf/bin/python scripts/deepseek_v4_fixtures.py model    # tests/fixtures/hf/tiny_deepseek_v4/
  /work/venv-hf/bin/python scripts/deepseek_v4_fixtures.py model_hca   # tests/fixtures/hf/tiny_deepseek_v4_hca/
  /work/venv-hf/bin/python scripts/deepseek_v4_fixtures.py model_csa   # tests/fixtures/hf/tiny_deepseek_v4_csa/
  /work/venv-hf/bin/python scripts/deepseek_v4_fixtures.py model_yarn  # tests/fixtures/hf/tiny_deepseek_v4_yarn/

- deepseek_v4_hc/golden.safetensors: transformers' DeepseekV4HyperConnection and DeepseekV4HyperHead (mHC) with
  random parameters (fn, base, scale; hc_fn, hc_base, hc_scale) on random streams (B, T, hc_mult, C) and a random
  block output (B, T, C): their mappings (post, comb), the collapsed block input, the expanded streams as
  DeepseekV4DecoderLayer forms them, the head's output, and the gradients of every input and parameter of
  loss = sum(expanded * w_expanded) + sum(collapsed * w_collapsed) + sum(head * w_head). The test
  tests/models/hyper_connection_test.cpp compares tidal's models/hyper_connection.h with them.
- deepseek_v4_fields.v5.json: every field of DeepseekV4Config (its to_dict() keys, __init__ parameters and
  attribute_map names) and its defaults as to_dict() writes them, as hf_fixtures.py fields writes the other
  families' (kept apart from config_fields/: the defaults' layer_types are CSA/HCA layers, which tidal refuses,
  so tests/unit/hf_deepseek_v4_config_test.cpp reads them with sliding layers).
- tiny_deepseek_v4/: a tiny random DeepseekV4ForCausalLM (3 sliding-window layers with a window shorter than
  the input, hash_moe then two top-k moe layers, mHC with 4 streams, partial interleaved RoPE, o_groups 2, a
  swiglu_limit the experts' pre-activations cross) saved with save_pretrained, its tid2eid tables, correction
  biases and sinks random, and golden.safetensors: ids, targets, logits, the mean cross-entropy `loss` and
  grad.<name> of every parameter. tests/models/deepseek_v4_test.cpp compares tidal's model with them.
- tiny_deepseek_v4_hca/: the same with layers 0 and 2 heavily_compressed_attention (m' = 4, compress_rope_theta 500,
  random position_bias).
- tiny_deepseek_v4_csa/: layers CSA, HCA, CSA (m = 2 for CSA: 6 overlapping entries over 12 tokens, the indexer's
  8 heads of 8 keeping the top 2 for each query; m' = 4 for HCA). The indexer's parameters get no gradient (its
  top-k choice is an index), so golden.safetensors has none for them.
- tiny_deepseek_v4_yarn/: the CSA fixture's layers with YaRN on the compressed layers' rope, given as a flat
  rope_parameters as the published V4 checkpoints give it (factor 4 over 6 original positions, beta_fast 4).
"""
import inspect
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as v4

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "hf")
META = {"transformers": transformers.__version__, "torch": torch.__version__}


def hc():
    c = transformers.DeepseekV4Config(hidden_size=8, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6,
                                      num_hidden_layers=1)
    gen = torch.Generator().manual_seed(0)

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).requires_grad_(True)

    conn, head = v4.DeepseekV4HyperConnection(c), v4.DeepseekV4HyperHead(c)
    with torch.no_grad():  # values away from the init (base 0, scale 1) so every term of the mappings matters
        for p, s in ((conn.fn, 0.5), (conn.base, 0.5), (conn.scale, 0.5), (head.hc_fn, 0.5), (head.hc_base, 0.5),
                     (head.hc_scale, 0.5)):
            p.copy_(torch.randn(p.shape, generator=gen) * s + (1.0 if p.dim() == 1 and p.numel() <= 3 else 0.0))
    b, t, n, d = 2, 3, c.hc_mult, c.hidden_size
    streams, block = rnd(b, t, n, d), rnd(b, t, d)
    post, comb, collapsed = conn(streams)
    expanded = post.unsqueeze(-1) * block.unsqueeze(-2) + torch.matmul(comb.transpose(-1, -2), streams)
    out = head(streams)
    w = {k: torch.randn(s, generator=gen) for k, s in
         (("w_expanded", expanded.shape), ("w_collapsed", collapsed.shape), ("w_head", out.shape))}
    loss = (expanded * w["w_expanded"]).sum() + (collapsed * w["w_collapsed"]).sum() + (out * w["w_head"]).sum()
    loss.backward()
    golden = {"streams": streams, "block": block, "post": post, "comb": comb, "collapsed": collapsed,
              "expanded": expanded, "head": out, "loss": loss.reshape(1), **w}
    for name, p in list(conn.named_parameters()) + list(head.named_parameters()):
        golden[name] = p
        golden["grad." + name] = p.grad
    golden["grad.streams"], golden["grad.block"] = streams.grad, block.grad
    path = os.path.join(OUT, "deepseek_v4_hc")
    os.makedirs(path, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in golden.items()}, os.path.join(path, "golden.safetensors"),
              metadata={**META, "hc_sinkhorn_iters": str(c.hc_sinkhorn_iters), "hc_eps": str(c.hc_eps),
                        "rms_norm_eps": str(c.rms_norm_eps)})
    print("hc: loss", loss.item())


def model(fixture="tiny_deepseek_v4", layer_types=("sliding_attention",) * 3, **extra):
    torch.manual_seed(0)
    c = transformers.DeepseekV4Config(
        vocab_size=64, hidden_size=16, num_hidden_layers=3, num_attention_heads=4, head_dim=8, q_lora_rank=12,
        partial_rotary_factor=0.5, o_groups=2, o_lora_rank=6, sliding_window=5,
        layer_types=list(layer_types), mlp_layer_types=["hash_moe", "moe", "moe"], n_routed_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=10, n_shared_experts=1, routed_scaling_factor=1.5,
        swiglu_limit=0.6, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6, rope_theta=10000.0,
        max_position_embeddings=64, tie_word_embeddings=False, num_nextn_predict_layers=0, **extra)
    c._experts_implementation = "eager"  # the per-expert loop (grouped_mm needs 16-byte strides)
    m = v4.DeepseekV4ForCausalLM(c).float()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("position_bias"):
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith(".scale") or name.endswith("hc_scale"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
        for name, b in m.named_buffers():
            if name.endswith("tid2eid"):
                b.copy_(torch.stack([torch.randperm(c.n_routed_experts, generator=gen)[:c.num_experts_per_tok]
                                     for _ in range(c.vocab_size)]))
            elif name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=gen))
    m.train()
    crossed = []  # gate/up pre-activations past swiglu_limit (every expert, every token of the block): clamps matter

    def count(module, args):
        pre = torch.einsum("nc,efc->enf", args[0], module.gate_up_proj)
        crossed.append(int((pre.abs() > c.swiglu_limit).sum()))

    hooks = [layer.mlp.experts.register_forward_pre_hook(count) for layer in m.model.layers]
    b, t = 2, 12
    tokens = torch.randint(0, c.vocab_size, (b, t + 1), generator=gen)
    ids, targets = tokens[:, :t].contiguous(), tokens[:, 1:].contiguous()
    logits = m(input_ids=ids).logits
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    loss.backward()
    for h in hooks:
        h.remove()
    assert all(n > 0 for n in crossed), crossed
    path = os.path.join(OUT, fixture)
    m.save_pretrained(path, safe_serialization=True)
    golden = {"ids": ids, "targets": targets, "logits": logits, "loss": loss.reshape(1)}
    # Shorter inputs whose last window is incomplete (7 tokens) or with no complete window at all (1 token).
    m.eval()
    with torch.no_grad():
        for t_short in (7, 1):
            golden[f"ids_{t_short}"] = ids[:, :t_short].contiguous()
            golden[f"logits_{t_short}"] = m(input_ids=ids[:, :t_short]).logits
    m.train()
    for name, p in m.named_parameters():  # the indexer's get none: its top-k indices carry no gradient
        if p.grad is not None:
            golden["grad." + name] = p.grad
    save_file({k: v.detach().contiguous() for k, v in golden.items()}, os.path.join(path, "golden.safetensors"),
              metadata=META)
    print(fixture, "loss", loss.item(), "params", sum(p.numel() for p in m.parameters()),
          "pre-activations past swiglu_limit per layer", crossed)


def model_hca():
    # Two heavily compressed layers (m' = 4 over 12 tokens: 3 entries, the last token's window complete) around a
    # sliding one, their RoPE base apart from the sliding layers'.
    model("tiny_deepseek_v4_hca", ("heavily_compressed_attention", "sliding_attention", "heavily_compressed_attention"),
          compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 4},
          compress_rope_theta=500.0)


def model_csa():
    # Compressed sparse attention (m = 2 over 12 tokens: 6 overlapping entries, the indexer keeping the top 2 of
    # them for each query) around a heavily compressed layer.
    model("tiny_deepseek_v4_csa", ("compressed_sparse_attention", "heavily_compressed_attention",
                                   "compressed_sparse_attention"),
          compress_rates={"compressed_sparse_attention": 2, "heavily_compressed_attention": 4},
          compress_rope_theta=500.0, index_n_heads=8, index_head_dim=8, index_topk=2)


def model_yarn():
    # The CSA fixture's layers with YaRN on the compressed layers' rope, given flat as the published checkpoints give
    # it (DeepseekV4Config folds it into rope_parameters.compress with attention_factor 1): factor 4 over 6 original
    # positions, so that over 12 tokens one of the two rotary frequencies is interpolated and one ramped.
    model("tiny_deepseek_v4_yarn", ("compressed_sparse_attention", "heavily_compressed_attention",
                                    "compressed_sparse_attention"),
          compress_rates={"compressed_sparse_attention": 2, "heavily_compressed_attention": 4},
          compress_rope_theta=500.0, index_n_heads=8, index_head_dim=8, index_topk=2,
          rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 6,
                           "beta_fast": 4.0, "beta_slow": 1.0})


def fields():
    cls = transformers.DeepseekV4Config
    defaults = cls().to_dict()
    params = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "kwargs")]
    names = set(defaults) | set(params) | set(getattr(cls, "attribute_map", {}))
    with open(os.path.join(OUT, "deepseek_v4_fields.v5.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "class": cls.__name__, "fields": sorted(names),
                   "defaults": json.loads(json.dumps(defaults, default=str))}, f, indent=1, sort_keys=True)
        f.write("\n")
    print("fields:", len(names))


if __name__ == "__main__":
    parts = {"hc": hc, "fields": fields, "model": model, "model_hca": model_hca, "model_csa": model_csa,
             "model_yarn": model_yarn}
    for part in sys.argv[1:] or list(parts):
        parts[part]()
