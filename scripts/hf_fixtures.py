#!/usr/bin/env python3
"""Writes the Hugging Face fixtures of tests/fixtures/hf/ from transformers itself (issue 29).

Run from a virtual environment outside the repo (tests never need it: the fixtures are committed):

  python3 -m venv /work/venv-hf && /work/venv-hf/bin/pip install 'transformers>=5' torch
  /work/venv-hf/bin/python scripts/hf_fixtures.py all      # fields (5.x), rope goldens, tiny Llama 3
  python3 -m venv /work/venv-hf4 && /work/venv-hf4/bin/pip install 'transformers>=4.57,<5'
  /work/venv-hf4/bin/python scripts/hf_fixtures.py fields  # the 4.x field lists (no torch needed)

- config_fields/<family>.v<major>.json: every field of the family's config class (its to_dict() keys, its
  __init__ parameters and its attribute_map names) and the class defaults as to_dict() writes them. The
  test hf_config_fields_test.cpp fails on a field tidal neither reads nor lists as harmless.
- rope_inv_freq.json: inv_freq and the cos/sin factor of each rope type, from transformers' own
  rotary embedding class (LlamaRotaryEmbedding: ROPE_INIT_FUNCTIONS, and its dynamic update).
- tiny_llama3/: a tiny Llama saved by transformers (rope_theta 500000 and llama3 scaling in
  rope_parameters) and golden.safetensors: input_ids and the logits of transformers' forward (f32).
"""
import inspect
import json
import os
import sys

import transformers

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "hf")
FAMILIES = {"gpt2": "GPT2Config", "llama": "LlamaConfig", "qwen3": "Qwen3Config", "qwen3_moe": "Qwen3MoeConfig"}


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")


def fields():
    major = transformers.__version__.split(".")[0]
    for family, name in FAMILIES.items():
        cls = getattr(transformers, name)
        defaults = cls().to_dict()
        params = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "kwargs")]
        names = set(defaults) | set(params) | set(getattr(cls, "attribute_map", {}))
        write_json(os.path.join(OUT, "config_fields", f"{family}.v{major}.json"), {
            "transformers": transformers.__version__,
            "class": name,
            "fields": sorted(names),
            "defaults": json.loads(json.dumps(defaults, default=str)),
        })


# (name, head_dim, max_position_embeddings, rope dict in 5.x form, sequence length of the forward)
ROPE_CASES = [
    ("default", 64, 2048, {"rope_type": "default", "rope_theta": 10000.0}, 16),
    ("default_theta_500000", 128, 8192, {"rope_type": "default", "rope_theta": 500000.0}, 16),
    ("linear", 64, 4096, {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, 16),
    ("dynamic_short", 64, 2048, {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, 100),
    ("dynamic_long", 64, 2048, {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, 3000),
    ("llama3", 128, 131072, {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, 16),
    ("llama3_factor32", 64, 131072, {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 8192}, 16),
    ("yarn", 128, 131072, {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                           "original_max_position_embeddings": 32768}, 16),
    ("yarn_betas_no_truncate", 64, 65536, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0,
                                           "original_max_position_embeddings": 4096, "beta_fast": 16.0,
                                           "beta_slow": 2.0, "truncate": False}, 16),
    ("yarn_mscale", 64, 163840, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                                 "original_max_position_embeddings": 4096, "mscale": 1.0,
                                 "mscale_all_dim": 0.707}, 16),
    ("yarn_attention_factor", 64, 131072, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                           "original_max_position_embeddings": 32768,
                                           "attention_factor": 1.25}, 16),
]


def rope():
    import torch
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cases = []
    for name, head_dim, max_pos, params, seq in ROPE_CASES:
        config = transformers.LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
                                          max_position_embeddings=max_pos, rope_parameters=dict(params))
        emb = LlamaRotaryEmbedding(config)
        x = torch.zeros(1, seq, 1)
        pos = torch.arange(seq)[None]
        cos, _ = emb(x, pos)  # runs the dynamic update for the forward's length
        cases.append({"name": name, "head_dim": head_dim, "max_position_embeddings": max_pos,
                      "rope_parameters": params, "seq_len": seq,
                      "inv_freq": [float(v) for v in emb.inv_freq],
                      "attention_scaling": float(emb.attention_scaling),
                      "cos_last_row": [float(v) for v in cos[0, -1]]})
    write_json(os.path.join(OUT, "rope_inv_freq.json"), {"transformers": transformers.__version__,
                                                         "torch": torch.__version__, "cases": cases})


def tiny_llama3():
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():  # larger than the default init, so the logits vary
            p.normal_(0.0, 0.2)
    path = os.path.join(OUT, "tiny_llama3")
    model.save_pretrained(path, safe_serialization=True)
    ids = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(ids).logits.float()
    save_file({"input_ids": ids.to(torch.int64), "logits": logits.contiguous()},
              os.path.join(path, "golden.safetensors"), metadata={"transformers": transformers.__version__,
                                                                  "torch": torch.__version__})


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    if what in ("fields", "all"):
        fields()
    if what in ("rope", "all"):
        rope()
    if what in ("tiny", "all"):
        tiny_llama3()
