#!/usr/bin/env python3
"""Writes the Hugging Face fixtures of tests/fixtures/hf/ from transformers itself (issue 29).

Run from a virtual environment outside the repo (tests never need it: the fixtures are committed):

  python3 -m venv /work/venv-hf && /work/venv-hf/bin/pip install 'transformers>=5' torch
  /work/venv-hf/bin/python scripts/hf_fixtures.py all      # fields (5.x), rope goldens, the golden table
  /work/venv-hf/bin/python scripts/hf_fixtures.py golden   # the golden table only (or one: tiny_qwen3, ...)
  python3 -m venv /work/venv-hf4 && /work/venv-hf4/bin/pip install 'transformers>=4.57,<5'
  /work/venv-hf4/bin/python scripts/hf_fixtures.py fields  # the 4.x field lists (no torch needed)

- config_fields/<family>.v<major>.json: every field of the family's config class (its to_dict() keys, its
  __init__ parameters and its attribute_map names) and the class defaults as to_dict() writes them. The
  test hf_config_fields_test.cpp fails on a field tidal neither reads nor lists as harmless.
- published/v5/<name>.json: each hand-written published config.json of published/ (the model cards' values)
  as transformers 5's config class re-saves it (`hf_fixtures.py published`).
- rope_inv_freq.json: inv_freq and the cos/sin factor of each rope type, from transformers' own
  rotary embedding class (LlamaRotaryEmbedding: ROPE_INIT_FUNCTIONS, and its dynamic update).
- the golden table (GOLDEN below; tests/models/hf_golden_test.cpp has one row per directory): tiny_gpt2/,
  tiny_llama3/ (rope_theta 500000 and llama3 scaling in rope_parameters), tiny_qwen3/, tiny_qwen3_moe/,
  tiny_mistral/ (a sliding window shorter than the input), tiny_qwen2/ (q/k/v biases, one sliding layer): a tiny
  random model of transformers' own class saved with save_pretrained, and golden.safetensors: input_ids,
  labels, logits, the causal-LM loss (plain CE; for MoE also aux_loss and loss_with_aux, transformers' loss
  with output_router_logits, which adds router_aux_loss_coef * aux_loss), grad.<name> of a few tensors after
  the plain CE's backward, and `generated` (greedy, 8 new tokens). A new family: one GOLDEN entry here and
  one row in the test.
"""
import inspect
import json
import os
import re
import sys

import transformers

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "hf")
FAMILIES = {"gpt2": "GPT2Config", "llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config",
            "qwen3": "Qwen3Config", "qwen3_moe": "Qwen3MoeConfig", "gemma3_text": "Gemma3TextConfig",
            "deepseek_v3": "DeepseekV3Config", "gemma3": "Gemma3Config"}


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


# Published config.json files (tests/fixtures/hf/published/<name>.json, hand-written from the model cards in
# the 4.x format they were published in): each re-saved by transformers 5's own config class into
# published/v5/<name>.json, the format a model directory saved today has.
def published():
    src = os.path.join(OUT, "published")
    for name in sorted(os.listdir(src)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(src, name)) as f:
            original = json.load(f)
        cls = getattr(transformers, FAMILIES[original["model_type"]])
        write_json(os.path.join(src, "v5", name), cls.from_dict(original).to_diff_dict())


# The golden table (tests/models/hf_golden_test.cpp has one row per directory). Each fixture: a tiny random
# model of transformers' own class (f32, seeded), saved with save_pretrained, and golden.safetensors.
def llama3_config():
    return transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64})


def gpt2_config():  # GPT-2 always ties its head; no GQA in the family
    return transformers.GPT2Config(vocab_size=96, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                   activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                   bos_token_id=0, eos_token_id=0)


def qwen3_config():  # head_dim 16 != hidden / heads = 8, GQA 4:2, tied head
    return transformers.Qwen3Config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                    max_position_embeddings=128, tie_word_embeddings=True)


def qwen3_moe_config():  # layer 0 dense (mlp_only_layers), layers 1-2 sparse: 4 experts, top-2; GQA 4:2
    return transformers.Qwen3MoeConfig(vocab_size=64, hidden_size=32, intermediate_size=32, moe_intermediate_size=16,
                                       num_experts=4, num_experts_per_tok=2, norm_topk_prob=True,
                                       num_hidden_layers=3, mlp_only_layers=[0], num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
                                       router_aux_loss_coef=0.01, tie_word_embeddings=False)


def mistral_config():  # every layer slides: a window of 5 keys, shorter than the 16-token input; GQA 4:2
    return transformers.MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                      max_position_embeddings=128, sliding_window=5,
                                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                                      tie_word_embeddings=False)


def qwen2_config():  # q/k/v biases; layer 0 full, layer 1 slides over 4 keys (use_sliding_window, max_window_layers)
    return transformers.Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                    use_sliding_window=True, sliding_window=4, max_window_layers=1,
                                    tie_word_embeddings=False)


def gemma3_config():  # layers 0, 1, 3 slide over 5 keys, layer 2 is full; RoPE linear x2 on full layers
    return transformers.Gemma3TextConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=128, sliding_window=5,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        query_pre_attn_scalar=12, tie_word_embeddings=True,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})


def deepseek_v3_config():  # MLA with q LoRA and interleaved RoPE, yarn x4 with mscale_all_dim; layer 0 dense,
    # layers 1-2: 8 routed experts in 4 groups (the best 2 kept), top-2, scaled by 2.5, one shared expert
    return transformers.DeepseekV3Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8,
        routed_scaling_factor=2.5, kv_lora_rank=12, q_lora_rank=16, qk_rope_head_dim=4, v_head_dim=6,
        qk_nope_head_dim=8, n_group=4, topk_group=2, num_experts_per_tok=2, first_k_dense_replace=1,
        norm_topk_prob=True, max_position_embeddings=128, rope_interleave=True, tie_word_embeddings=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "original_max_position_embeddings": 32, "beta_fast": 32,
                         "beta_slow": 1})


def deepseek_v3_plain_config():  # q_proj (no q LoRA), RoPE not interleaved and unscaled, one expert group,
    # no shared expert, weights not renormalized; layers 0-1 dense, layer 2 sparse
    return transformers.DeepseekV3Config(
        vocab_size=64, hidden_size=32, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=3,
        num_attention_heads=2, num_key_value_heads=2, n_shared_experts=0, n_routed_experts=4,
        routed_scaling_factor=1.5, kv_lora_rank=8, q_lora_rank=None, qk_rope_head_dim=8, v_head_dim=12,
        qk_nope_head_dim=8, n_group=1, topk_group=1, num_experts_per_tok=2, first_k_dense_replace=2,
        norm_topk_prob=False, max_position_embeddings=128, rope_interleave=False, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def gemma3_multimodal_config():  # Gemma-3-4B's layout: the language model of a Gemma3ForConditionalGeneration
    # (a tiny SigLIP tower beside it, which tidal does not build); 3 layers, layer 2 full
    text = gemma3_config().to_dict()
    text.update(num_hidden_layers=3, layer_types=["sliding_attention", "sliding_attention", "full_attention"])
    vision = transformers.SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, image_size=28, patch_size=14)
    return transformers.Gemma3Config(text_config=text, vision_config=vision.to_dict(), mm_tokens_per_image=4,
                                     boi_token_index=100, eoi_token_index=101, image_token_index=102)  # past V: text only


# The saved names of a multimodal checkpoint (language_model.model.*) are the text model's (model.*) in tidal;
# transformers 5's module names are model.language_model.*.
def multimodal_param_name(saved):
    return saved.replace("language_model.model.", "model.language_model.", 1)


def multimodal_tidal_name(saved):
    return saved.replace("language_model.model.", "model.", 1)


# directory: (config, model class, input (batch, seq), gradients to record, by the names of model.safetensors)
GOLDEN = {
    "tiny_gpt2": (gpt2_config, "GPT2LMHeadModel", (2, 12), [
        "transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.attn.c_attn.weight",
        "transformer.h.1.mlp.c_fc.weight", "transformer.ln_f.weight"]),
    "tiny_llama3": (llama3_config, "LlamaForCausalLM", (2, 24), [
        "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
        "model.layers.1.self_attn.k_proj.weight", "model.layers.0.mlp.gate_proj.weight", "model.norm.weight",
        "lm_head.weight"]),
    "tiny_qwen3": (qwen3_config, "Qwen3ForCausalLM", (2, 12), [
        "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
        "model.layers.1.self_attn.k_norm.weight", "model.layers.1.mlp.down_proj.weight", "model.norm.weight"]),
    "tiny_qwen3_moe": (qwen3_moe_config, "Qwen3MoeForCausalLM", (2, 12), [
        "model.embed_tokens.weight", "model.layers.1.self_attn.q_proj.weight",
        "model.layers.2.self_attn.k_proj.weight", "model.layers.0.mlp.up_proj.weight",
        "model.layers.1.mlp.gate.weight", "model.layers.1.mlp.experts.2.gate_proj.weight",
        "model.layers.2.mlp.experts.0.down_proj.weight", "model.norm.weight", "lm_head.weight"]),
    "tiny_mistral": (mistral_config, "MistralForCausalLM", (2, 16), [
        "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
        "model.layers.1.self_attn.v_proj.weight", "model.layers.1.mlp.down_proj.weight", "lm_head.weight"]),
    "tiny_gemma3": (gemma3_config, "Gemma3ForCausalLM", (2, 16), [
        "model.embed_tokens.weight", "model.layers.0.self_attn.q_norm.weight", "model.layers.2.self_attn.k_proj.weight",
        "model.layers.1.post_attention_layernorm.weight", "model.layers.3.pre_feedforward_layernorm.weight",
        "model.layers.2.mlp.gate_proj.weight", "model.layers.0.post_feedforward_layernorm.weight",
        "model.norm.weight"]),
    "tiny_deepseek_v3": (deepseek_v3_config, "DeepseekV3ForCausalLM", (2, 16), [
        "model.embed_tokens.weight", "model.layers.0.self_attn.q_a_proj.weight",
        "model.layers.1.self_attn.q_a_layernorm.weight", "model.layers.1.self_attn.q_b_proj.weight",
        "model.layers.2.self_attn.kv_a_proj_with_mqa.weight", "model.layers.0.self_attn.kv_b_proj.weight",
        "model.layers.2.self_attn.o_proj.weight", "model.layers.0.mlp.gate_proj.weight",
        "model.layers.1.mlp.gate.weight", "model.layers.1.mlp.experts.3.gate_proj.weight",
        "model.layers.2.mlp.experts.5.down_proj.weight", "model.layers.2.mlp.shared_experts.up_proj.weight",
        "lm_head.weight"]),
    "tiny_deepseek_v3_plain": (deepseek_v3_plain_config, "DeepseekV3ForCausalLM", (2, 16), [
        "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
        "model.layers.1.self_attn.kv_a_layernorm.weight", "model.layers.2.self_attn.kv_b_proj.weight",
        "model.layers.2.mlp.gate.weight", "model.layers.2.mlp.experts.1.up_proj.weight", "lm_head.weight"]),
    "tiny_gemma3_multimodal": (gemma3_multimodal_config, "Gemma3ForConditionalGeneration", (2, 16), [
        "language_model.model.embed_tokens.weight", "language_model.model.layers.0.self_attn.q_proj.weight",
        "language_model.model.layers.2.mlp.up_proj.weight", "language_model.model.layers.1.pre_feedforward_layernorm.weight",
        "language_model.model.norm.weight"]),
    "tiny_qwen2": (qwen2_config, "Qwen2ForCausalLM", (2, 16), [
        "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.bias", "model.layers.1.self_attn.k_proj.weight",
        "model.layers.1.self_attn.v_proj.bias", "model.layers.0.mlp.gate_proj.weight", "lm_head.weight"]),
}
PROMPT = [3, 14, 15, 9, 2, 6]  # greedy continuation of this prompt, 8 new tokens


def randomize(model):
    """Weights larger than the default init (std 0.02 gives near-uniform logits, near-tied greedy choices and
    routing); norm weights around 1, biases small."""
    import torch
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name or "ln_" in name):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.dim() == 1:
                p.normal_(0.0, 0.1)
            else:
                p.normal_(0.0, 0.2)
        for name, b in model.named_buffers():  # DeepSeek-V3's router correction bias: it changes the choice
            if name.endswith("e_score_correction_bias"):
                b.normal_(0.0, 0.1)


def grad_of(model, saved, name):
    """The gradient of a tensor of model.safetensors: a parameter, or one expert's slice of transformers 5's
    fused experts (gate_up_proj (E, 2I, H) = [gate; up], down_proj (E, H, I)); checked against the file."""
    import torch
    params = dict(model.named_parameters())
    if name.startswith("language_model.model."):  # a multimodal checkpoint's language model
        g = params[multimodal_param_name(name)].grad
        value = params[multimodal_param_name(name)].detach()
    elif name in params:
        g = params[name].grad
        value = params[name].detach()
    else:
        m = re.fullmatch(r"(.*\.experts)\.(\d+)\.(gate|up|down)_proj\.weight", name)
        assert m, f"{name}: no parameter of that name"
        prefix, e, which = m.group(1), int(m.group(2)), m.group(3)
        if which == "down":
            p = params[prefix + ".down_proj"]
            g, value = p.grad[e], p.detach()[e]
        else:
            p = params[prefix + ".gate_up_proj"]
            half = p.shape[1] // 2
            rows = slice(0, half) if which == "gate" else slice(half, 2 * half)
            g, value = p.grad[e, rows], p.detach()[e, rows]
    assert torch.equal(value, saved[name]), f"{name}: the gradient's tensor is not the saved one"
    return g.detach().clone().contiguous()


def golden(directory):
    import torch
    from safetensors.torch import save_file, load_file

    make_config, cls, (batch, seq), grads = GOLDEN[directory]
    torch.manual_seed(0)
    config = make_config()
    model = getattr(transformers, cls)(config).eval()
    randomize(model)
    model.generation_config.eos_token_id = None  # greedy runs all 8 tokens, as tidal's stop_token -1
    model.generation_config.pad_token_id = 0
    path = os.path.join(OUT, directory)
    model.save_pretrained(path, safe_serialization=True)
    saved = load_file(os.path.join(path, "model.safetensors"))

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.get_text_config().vocab_size, (batch, seq), generator=gen)
    labels = ids.clone()
    labels[0, seq // 2] = -100  # ignore_index: mean over the other positions
    labels[1, 1] = -100
    moe = cls.startswith("Qwen3Moe")
    extra = {"output_router_logits": True} if moe else {}
    out = model(ids, labels=labels, **extra)
    golden = {"input_ids": ids, "labels": labels, "logits": out.logits.detach().float().contiguous()}
    if moe:  # transformers' loss with output_router_logits is CE + router_aux_loss_coef * aux_loss
        golden["loss_with_aux"] = out.loss.detach().reshape(1)
        golden["aux_loss"] = out.aux_loss.detach().reshape(1)
        ce = model(ids, labels=labels).loss  # plain CE (output_router_logits false: no aux term)
        assert torch.allclose(out.loss, ce + config.router_aux_loss_coef * out.aux_loss)
    else:
        ce = out.loss
    golden["loss"] = ce.detach().reshape(1)
    model.zero_grad()
    ce.backward()
    for name in grads:
        golden["grad." + multimodal_tidal_name(name)] = grad_of(model, saved, name)
    prompt = torch.tensor([PROMPT])
    with torch.no_grad():
        gen_out = model.generate(prompt, do_sample=False, max_new_tokens=8, output_scores=True,
                                 return_dict_in_generate=True)
    golden["generated"] = gen_out.sequences[0].contiguous()
    gaps = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in gen_out.scores]
    save_file({k: v.contiguous() for k, v in golden.items()}, os.path.join(path, "golden.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__,
                        "greedy_min_gap": f"{min(gaps):.4g}"})
    size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    print(f"{directory}: {size / 1024:.0f} KiB, loss {float(golden['loss']):.5f}, greedy top-2 gap >= {min(gaps):.3g}")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def added_tokens():
    """tests/fixtures/hf/normalized_added_tokens.json: a byte-level BPE tokenizer.json with an NFC normalizer and
    added tokens with "normalized" true and false (one of them written decomposed, NFD), and the ids Hugging Face
    tokenizers gives a few texts: normalized tokens are found in the normalized text, the others in the raw text."""
    import tokenizers
    vocab = {sym: i for i, sym in enumerate(bytes_to_unicode().values())}
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [
            {"id": 256, "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True},
            {"id": 257, "content": "cafe\u0301", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": True, "special": False},  # NFD: matches the NFC "café" once normalized
            {"id": 258, "content": "nai\u0308ve", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": False},  # NFD, not normalized: only the raw NFD spelling matches
            {"id": 259, "content": "<x>", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": True, "special": False},
        ],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }
    text = json.dumps(tok, ensure_ascii=False)
    t = tokenizers.Tokenizer.from_str(text)
    cases = ["a caf\u00e9 here", "a cafe\u0301 here", "nai\u0308ve and na\u00efve", "<x>y<|endoftext|>z",
             "caf\u00e9<x>cafe\u0301"]
    out = {"tokenizers": tokenizers.__version__, "tokenizer": tok,
           "cases": [{"text": c, "ids": t.encode(c).ids} for c in cases]}
    write_json(os.path.join(OUT, "normalized_added_tokens.json"), out)
    for c in out["cases"]:
        print(ascii(c["text"]), c["ids"])


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    if what in ("fields", "all"):
        fields()
    if what in ("rope", "all"):
        rope()
    if what in ("published", "all"):
        published()
    if what in ("tokenizer", "all"):
        added_tokens()
    for directory in GOLDEN:  # "golden" (all of them), or one directory's name ("tiny" is tiny_llama3)
        if what in ("golden", "all", directory) or (what == "tiny" and directory == "tiny_llama3"):
            golden(directory)
