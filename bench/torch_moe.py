"""The transformers side of bench/compare_torch.sh's MoE config: the model of a Hugging Face config.json
(Qwen3MoeForCausalLM for bench/configs/qwen3_moe_512.json) built by transformers 5.x, SDPA attention, trained
on seeded random tokens with AdamW (fused, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on the matrices only,
gradient clipping at 1.0), in fp32 or under bf16 autocast, and the router's auxiliary loss at the config's
coefficient as tidal adds it. Prints one JSON line: the median step time in ms over the timed steps.
"""
import argparse
import json
import statistics
import time

import torch
import transformers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--bf16", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(0)
    config = transformers.AutoConfig.from_pretrained(a.config)
    config.output_router_logits = True  # the auxiliary loss, as tidal trains it
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    g = torch.Generator().manual_seed(1)
    times = []
    for step in range(a.steps):
        ids = torch.randint(0, config.vocab_size, (a.batch, a.seq), generator=g)
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            loss = model(input_ids=ids, labels=ids).loss  # shifted inside, plus the auxiliary loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append((time.perf_counter() - start) * 1e3)
    print(json.dumps({"median_step_ms": statistics.median(times[a.warmup:]), "steps_ms": times}))


if __name__ == "__main__":
    main()
