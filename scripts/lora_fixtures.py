#!/usr/bin/env python3
"""Writes tests/fixtures/lora/ from transformers and peft themselves (issue 31: LoRA against peft).

Run from a virtual environment outside the repo (tests never need it: the fixtures are committed):

  python3 -m venv /work/venv-hf && /work/venv-hf/bin/pip install 'transformers>=5' torch peft
  /work/venv-hf/bin/python scripts/lora_fixtures.py

The base is tests/fixtures/hf/tiny_qwen3 (a random Qwen3ForCausalLM, hf_fixtures.py). Written:
- qwen3_adapter/: a PEFT LoRA adapter on it (r 4, alpha 8, q_proj, v_proj and down_proj), saved by
  PeftModel.save_pretrained; its B matrices are random (init_lora_weights=False), so it changes the logits.
- golden.safetensors:
  - input_ids (2, 12) and labels (2, 12): an instruction batch, -100 on each row's prompt (its first 5 and
    4 tokens), as tidal prepare --handler-name writes them;
  - base_loss: transformers' causal-LM loss of the base model on that masked batch (labels shifted inside);
  - logits (2, 12, V): the adapted model's (peft);
  - losses (10,): ten steps of LoRA training of the adapted model on that batch, peft's trainable
    parameters (the adapters) under torch.optim.AdamW(lr 1e-2, betas (0.9, 0.95), eps 1e-8, weight decay 0),
    the loss before each step;
  - trained.<adapter tensor name>: two of the adapters after the ten steps.
- gpt2_adapter/ and gpt2_golden.safetensors: the same for GPT-2's Conv1D layers (peft's fan_in_fan_out).
tests/models/lora_peft_test.cpp checks tidal against each.
"""
import json
import os

import peft
import safetensors.torch
import torch
import transformers

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
BASE = os.path.join(ROOT, "hf", "tiny_qwen3")
OUT = os.path.join(ROOT, "lora")
STEPS = 10


def main():
    torch.manual_seed(31)
    model = transformers.AutoModelForCausalLM.from_pretrained(BASE, dtype=torch.float32)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (2, 12))
    labels = ids.clone()
    labels[0, :5] = -100
    labels[1, :4] = -100
    with torch.no_grad():
        base_loss = model(input_ids=ids, labels=labels).loss

    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj", "down_proj"],
                             init_lora_weights=False, task_type="CAUSAL_LM")
    lora = peft.get_peft_model(model, config)
    adapter_dir = os.path.join(OUT, "qwen3_adapter")
    lora.save_pretrained(adapter_dir)
    os.remove(os.path.join(adapter_dir, "README.md"))  # peft's model card template
    config_path = os.path.join(adapter_dir, "adapter_config.json")
    with open(config_path) as f:
        saved = json.load(f)
    saved["base_model_name_or_path"] = "tests/fixtures/hf/tiny_qwen3"  # not this machine's path
    with open(config_path, "w") as f:
        json.dump(saved, f, indent=2, sort_keys=True)
        f.write("\n")
    with torch.no_grad():
        logits = lora(input_ids=ids).logits

    trainable = [p for p in lora.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = lora(input_ids=ids, labels=labels).loss
        losses.append(loss.item())
        loss.backward()
        opt.step()
    named = dict(lora.named_parameters())
    trained = {}
    for peft_name in ["base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight",
                      "base_model.model.model.layers.1.mlp.down_proj.lora_B.default.weight"]:
        trained["trained." + peft_name.replace(".default", "")] = named[peft_name].detach().clone()

    tensors = {"input_ids": ids, "labels": labels, "base_loss": base_loss.reshape(1), "logits": logits,
               "losses": torch.tensor(losses, dtype=torch.float32), **trained}
    safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(OUT, "golden.safetensors"),
                                metadata={"transformers": transformers.__version__, "peft": peft.__version__,
                                          "torch": torch.__version__})
    print("losses", losses)
    gpt2_adapter()


def gpt2_adapter():
    """GPT-2's Conv1D layers (peft's fan_in_fan_out): gpt2_adapter/ on tests/fixtures/hf/tiny_gpt2 (r 4, alpha 8,
    c_attn and mlp.c_proj, random B), and gpt2_golden.safetensors: input_ids (2, 12) and the adapted logits."""
    torch.manual_seed(32)
    model = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(ROOT, "hf", "tiny_gpt2"), dtype=torch.float32)
    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["c_attn", "mlp.c_proj"],
                             fan_in_fan_out=True, init_lora_weights=False, task_type="CAUSAL_LM")
    lora = peft.get_peft_model(model, config)
    adapter_dir = os.path.join(OUT, "gpt2_adapter")
    lora.save_pretrained(adapter_dir)
    os.remove(os.path.join(adapter_dir, "README.md"))
    config_path = os.path.join(adapter_dir, "adapter_config.json")
    with open(config_path) as f:
        saved = json.load(f)
    saved["base_model_name_or_path"] = "tests/fixtures/hf/tiny_gpt2"
    with open(config_path, "w") as f:
        json.dump(saved, f, indent=2, sort_keys=True)
        f.write("\n")
    ids = torch.randint(0, model.config.vocab_size, (2, 12))
    with torch.no_grad():
        logits = lora(input_ids=ids).logits
    safetensors.torch.save_file({"input_ids": ids, "logits": logits.contiguous()},
                                os.path.join(OUT, "gpt2_golden.safetensors"),
                                metadata={"transformers": transformers.__version__, "peft": peft.__version__})


if __name__ == "__main__":
    main()
