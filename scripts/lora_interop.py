#!/usr/bin/env python3
"""LoRA interop check (issue 31; not run by .ci/run, not a test dependency): the adapters tidal trains load in
peft, and tidal export --merge-lora loads in transformers, with the same logits.

For a tiny Qwen3 (Linear layers) and a tiny GPT-2 (Conv1D layers, peft's fan_in_fan_out) of tests/fixtures/hf/:
  1. build/tidal train --pretrained DIR --mock-data --lora-target-modules ... --save TMP (a few steps, so the
     adapters are not zero);
  2. build/tidal export --load TMP --merge-lora --output TMP/merged;
  3. transformers loads DIR, peft's PeftModel.from_pretrained puts TMP/iter_N's adapter on it; transformers
     loads TMP/merged; both run the same token batch: the logits must agree (max |diff| / max |ref| < 1e-5),
     and differ from the base model's (the adapters were trained).
Run from a virtual environment with torch, transformers and peft (scripts/lora_fixtures.py says how):
  /work/venv-hf/bin/python scripts/lora_interop.py [BUILD_DIR]
docs/finetuning.md has the last run's table.
"""
import glob
import os
import subprocess
import sys
import tempfile

import peft
import torch
import transformers

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
CASES = [("tiny_qwen3", ["q_proj", "v_proj", "down_proj"]), ("tiny_gpt2", ["c_attn", "mlp.c_proj"])]


def run(args):
    subprocess.run([os.path.join(BUILD, "tidal")] + args, check=True, stdout=subprocess.DEVNULL)


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def main():
    failed = False
    print(f"| model | targets | peft vs merged export | base vs peft | transformers {transformers.__version__}, "
          f"peft {peft.__version__} |")
    print("|---|---|---|---|---|")
    for name, targets in CASES:
        base_dir = os.path.join(ROOT, "tests", "fixtures", "hf", name)
        with tempfile.TemporaryDirectory() as tmp:
            save = os.path.join(tmp, "save")
            run(["train", "--pretrained", base_dir, "--mock-data", "--seq-length", "12", "--micro-batch-size", "2",
                 "--train-iters", "4", "--lr", "5e-2", "--eval-interval", "0", "--no-progress", "--lora-r", "4",
                 "--lora-alpha", "8", "--lora-target-modules", *targets, "--save", save])
            iteration = sorted(glob.glob(os.path.join(save, "iter_*")))[-1]
            merged_dir = os.path.join(tmp, "merged")
            run(["export", "--load", save, "--merge-lora", "--output", merged_dir])
            base = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
            ids = torch.randint(0, base.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
            with torch.no_grad():
                plain = base(input_ids=ids).logits
                adapted = peft.PeftModel.from_pretrained(base, iteration)(input_ids=ids).logits
                merged = transformers.AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32)(
                    input_ids=ids).logits
        agree, moved = rel(merged, adapted), rel(plain, adapted)
        ok = agree < 1e-5 and moved > 1e-3
        failed = failed or not ok
        print(f"| {name} | {' '.join(targets)} | {agree:.2e} | {moved:.2e} | {'ok' if ok else 'FAIL'} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
