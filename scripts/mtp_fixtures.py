#!/usr/bin/env python3
"""Writes tests/fixtures/hf/tiny_deepseek_v3_mtp/: DeepSeek-V3 with two multi-token-prediction depths, and golden
values of Megatron-LM's MTP loss computed with transformers' own DeepSeek-V3 classes (issue 29).

transformers' causal LM neither builds nor trains the MTP modules (it skips model.layers.<L>.* on load), so the
reference here is Megatron-LM's MultiTokenPredictionLayer written in PyTorch around transformers' own modules:
depth k takes the previous depth's output h (the main model's final hidden states for k = 1) and the embedding of
the ids rolled left by k (0 rolled in),
    x = eh_proj(cat(enorm(embed(ids_k)), hnorm(h)));  h_k = shared_head.norm(DeepseekV3DecoderLayer_{L+k-1}(x))
and its loss is the mean cross-entropy of lm_head(h_k) against the targets rolled left by k (-100 rolled in). The
total is main + factor / D x sum_k loss_k. The MTP layers are saved as DeepSeek publishes them: model.layers.<L+k-1>
with enorm, hnorm, eh_proj, shared_head.norm, and copies of the embedding and the head (embed_tokens,
shared_head.head).

  /work/venv-hf/bin/python scripts/mtp_fixtures.py     # venv as in scripts/hf_fixtures.py

golden.safetensors: tokens (B, T + 1), loss (main CE), mtp_losses (D), total, grad.<name> of the total's backward.
"""
import os

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers.masking_utils import create_causal_mask
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

from hf_fixtures import deepseek_v3_config, randomize

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "hf", "tiny_deepseek_v3_mtp")
DEPTHS = 2
FACTOR = 0.3  # --mtp-loss-scaling-factor (Megatron's default is 0.1; larger here so the depths weigh more)
GRADS = ["model.embed_tokens.weight", "lm_head.weight", "model.norm.weight", "model.layers.1.mlp.gate.weight",
         "model.layers.2.self_attn.q_a_proj.weight", "model.layers.3.enorm.weight", "model.layers.3.hnorm.weight",
         "model.layers.3.eh_proj.weight", "model.layers.3.shared_head.norm.weight",
         "model.layers.3.self_attn.kv_b_proj.weight", "model.layers.3.mlp.shared_experts.down_proj.weight",
         "model.layers.4.eh_proj.weight", "model.layers.4.self_attn.o_proj.weight", "model.layers.4.mlp.gate.weight",
         "model.layers.4.input_layernorm.weight"]


def config():  # hf_fixtures.py's tiny_deepseek_v3 (layer 0 dense, 1-2 sparse) with its MTP layers 3-4, sparse too
    c = deepseek_v3_config()
    c.num_nextn_predict_layers = DEPTHS
    return c


def roll(x, k, fill):  # Megatron's roll_tensor applied k times: left by k, `fill` rolled in
    out = torch.full_like(x, fill)
    out[:, :-k] = x[:, k:]
    return out


def main():
    torch.manual_seed(0)
    c = config()
    model = transformers.DeepseekV3ForCausalLM(c).eval()
    L = c.num_hidden_layers
    for k in range(1, DEPTHS + 1):  # the MTP layers follow the decoder layers (DeepseekV3Model runs only L of them)
        layer = ds.DeepseekV3DecoderLayer(c, layer_idx=L + k - 1)
        layer.enorm = ds.DeepseekV3RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        layer.hnorm = ds.DeepseekV3RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        layer.eh_proj = torch.nn.Linear(2 * c.hidden_size, c.hidden_size, bias=False)
        layer.shared_head = torch.nn.Module()
        layer.shared_head.norm = ds.DeepseekV3RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        model.model.layers.append(layer)
    randomize(model)
    model.eval()

    batch, seq = 2, 16
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, c.vocab_size, (batch, seq + 1), generator=gen)
    inputs, targets = tokens[:, :seq], tokens[:, 1:].clone()
    targets[0, 5] = -100  # ignored targets move with the rolls
    targets[1, 9] = -100
    labels = torch.cat([tokens[:, :1], targets], dim=1)  # labels[:, 1:] = targets (tidal's instruction layout)

    hidden = model.model(inputs).last_hidden_state  # (B, T, C) after the final norm
    # The main model's loss exactly as its forward computes it (no internal shift: targets are given aligned).
    main = torch.nn.functional.cross_entropy(model.lm_head(hidden).flatten(0, 1), targets.flatten())
    pos = torch.arange(seq).unsqueeze(0)
    h = hidden
    mask = create_causal_mask(config=c, inputs_embeds=h, attention_mask=None, cache=None, position_ids=pos)
    rope = model.model.rotary_emb(h, pos)
    mtp = []
    for k in range(1, DEPTHS + 1):
        layer = model.model.layers[L + k - 1]
        e = model.model.embed_tokens(roll(inputs, k, 0))
        x = layer.eh_proj(torch.cat([layer.enorm(e), layer.hnorm(h)], dim=-1))
        h = layer.shared_head.norm(layer(x, attention_mask=mask, position_ids=pos, position_embeddings=rope))
        mtp.append(torch.nn.functional.cross_entropy(model.lm_head(h).flatten(0, 1), roll(targets, k, -100).flatten()))
    total = main + FACTOR / DEPTHS * sum(mtp)
    model.zero_grad()
    total.backward()

    model.save_pretrained(OUT, safe_serialization=True)
    path = os.path.join(OUT, "model.safetensors")
    saved = load_file(path)
    for k in range(1, DEPTHS + 1):  # DeepSeek's copies of the shared embedding and head in each MTP layer
        saved[f"model.layers.{L + k - 1}.embed_tokens.weight"] = saved["model.embed_tokens.weight"].clone()
        saved[f"model.layers.{L + k - 1}.shared_head.head.weight"] = saved["lm_head.weight"].clone()
    save_file(saved, path, metadata={"format": "pt"})
    params = dict(model.named_parameters())
    golden = {"tokens": tokens, "labels": labels, "loss": main.detach().reshape(1),
              "mtp_losses": torch.stack([m.detach() for m in mtp]), "total": total.detach().reshape(1)}
    for name in GRADS:
        assert torch.equal(params[name].detach(), saved[name]), name
        golden["grad." + name] = params[name].grad.detach().clone().contiguous()
    save_file({k: v.contiguous() for k, v in golden.items()}, os.path.join(OUT, "golden.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__,
                        "mtp_loss_scaling_factor": str(FACTOR)})
    print(f"main {main.item():.5f}, mtp {[round(m.item(), 5) for m in mtp]}, total {total.item():.5f}")


if __name__ == "__main__":
    main()
