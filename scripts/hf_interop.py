"""Hugging Face interop check (run by scripts/hf_interop.sh, which makes the virtual environment).

For each tiny preset, and each fixture directory of tests/fixtures/hf/ that has a golden.safetensors (the
golden table of tests/models/hf_golden_test.cpp: one per family, saved by transformers itself, trained
from with --pretrained), and each dtype: `tidal train --mock-data --save` a few steps, then load the saved
iteration directory (model.safetensors + config.json) with transformers' AutoModelForCausalLM and
compare its logits on a fixed token batch with tidal's own (`tidal_parity_dump --logits`, computed in
the checkpoint's dtype); a bf16 checkpoint also widened to f32 on both sides (`--logits-f32`), which
checks its weights and mapping at f32's tolerance. Prints a table; exit status 1 if any case fails.
docs/interop.md.

Tolerances, relative to S = max |logit_hf| (tests/parity/reference.py, shared with the parity test):
  f32:  TOL = 1e-4. Both sides compute in f32 (unit roundoff 2^-24 ~ 6e-8) from the same f32 weights
        and differ only in summation order and kernels (oneDNN vs ATen, flash vs eager attention),
        far below 1e-4 relative on these models (~3e-7 measured). Measured on tiny-llama: a
        transposed o_proj moves the logits 1.3 relative, a gate/up swap 2.6e-2, rms_norm_eps 1e-5
        for 1e-6 1e-2, rope_theta 20000 for 10000 7e-4 (all caught); rope_theta 10100 only 1.1e-5
        on 16 positions (not caught).
  bf16: bf16_tolerance(L) = 3 * 2^-8 * sqrt(2 * (12 L + 4)): bf16's unit roundoff, the roundings of
        both implementations through L layers, added as independent errors (Higham & Mary's
        probabilistic bound, lambda = 3; derived in reference.py's bf16_tolerance). It bounds the
        numerics only: a swapped gate/up projection moves the logits ~3% and can hide in it, which
        is why each bf16 checkpoint is also compared widened to f32.
"""
import argparse
import datetime
import glob
import json
import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
import numpy as np
import torch
import transformers
from safetensors.numpy import save_file, load_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "parity"))
from reference import TOL, bf16_tolerance, num_layers  # noqa: E402  (the parity test's tolerances)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PRESETS = ["tiny-gpt2", "tiny-llama", "tiny-qwen3", "tiny-qwen3-moe", "tiny-mistral", "tiny-qwen2", "tiny-gemma3",
           "tiny-deepseek-v3"]
# The golden table's directories: a family that joins it (scripts/hf_fixtures.py) is checked here too.
FIXTURES = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(ROOT, "tests", "fixtures", "hf", "*",
                                                                    "golden.safetensors")))
# Flags a source trains with besides the common ones: the MTP fixture with its two depths (saved as model.layers.3-4,
# which transformers skips on load).
EXTRA = {"tiny_deepseek_v3_mtp": ["--mtp-num-layers", "2"]}
STEPS = 4
BATCH, SEQ = 2, 16


def tolerance(dtype, layers, scale):
    return (TOL if dtype == "float32" else bf16_tolerance(layers)) * scale


def train(build, source, bf16, save):
    """source: a preset's name, or a Hugging Face directory to start from (--pretrained)."""
    model = ["--pretrained", source] if os.path.isdir(source) else ["--model", source]
    cmd = [f"{build}/tidal", "train", *model, "--mock-data", "--train-iters", str(STEPS), "--seq-length", "32", "--micro-batch-size", "2", "--seed", "7", "--eval-iters", "1",
           "--save", save, *EXTRA.get(os.path.basename(source), [])]
    if bf16:
        cmd.append("--bf16")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"tidal train failed ({' '.join(cmd)}):\n{r.stderr[-2000:]}")
    iters = sorted(glob.glob(os.path.join(save, "iter_*")))
    if not iters:
        raise RuntimeError(f"tidal train wrote no iter_* directory under {save}")
    return iters[-1]


def hf_logits(iter_dir, tokens, compute):
    dtype = "auto" if compute == "saved" else torch.float32
    model = transformers.AutoModelForCausalLM.from_pretrained(iter_dir, dtype=dtype, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        out = model(torch.from_numpy(tokens)).logits
    return out.float().numpy(), model.dtype


def compare(build, work, name, save, iter_dir, config, compute):
    """max |dlogit|, tolerance and max |logit| of one checkpoint computed in its saved dtype
    (compute "saved") or widened to f32 ("f32")."""
    dtype = config["torch_dtype"] if compute == "saved" else "float32"
    rng = np.random.default_rng(11)
    tokens = rng.integers(0, config["vocab_size"], size=(BATCH, SEQ), dtype=np.int64)
    tok_file, out_file = os.path.join(work, name + ".tokens"), os.path.join(work, f"{name}.{compute}.out")
    save_file({"tokens": tokens}, tok_file)
    mode = "--logits" if compute == "saved" else "--logits-f32"
    r = subprocess.run([f"{build}/tidal_parity_dump", mode, save, tok_file, out_file], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"tidal_parity_dump {mode} failed:\n{r.stderr[-2000:]}")
    ours = load_file(out_file)["logits"]
    theirs, hf_dtype = hf_logits(iter_dir, tokens, compute)
    assert str(hf_dtype) == f"torch.{dtype}", f"transformers computed in {hf_dtype}, expected {dtype}"
    assert ours.shape == theirs.shape, f"shapes {ours.shape} vs {theirs.shape}"
    per_position = np.abs(ours.astype(np.float64) - theirs).max(axis=-1)  # (B, T)
    scale = float(np.abs(theirs).max())
    return per_position, tolerance(dtype, num_layers(config), scale), scale


# A bf16 MoE model's experts are a discrete choice: where two experts' scores are within bf16's rounding,
# transformers and tidal (different summation orders) may pick different ones, and that position (and the
# later ones attending to it) moves by far more than rounding. Such a case passes when at least this share
# of positions is within the tolerance, and the note says how many are not. f32 and "bf16 in f32" rows,
# and every dense model, must have every position within it.
ROUTING_SHARE = 0.75


def routed(config):
    return bool(config.get("num_experts") or config.get("n_routed_experts") or config.get("num_local_experts"))


def cpu_name():
    r = subprocess.run(["lscpu"], capture_output=True, text=True)
    names = [line.split(":", 1)[1].strip() for line in r.stdout.splitlines() if line.startswith("Model name")]
    return names[0] if names else "unknown CPU"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--work", required=True)
    ap.add_argument("--only", default="", help="only the presets and directories whose name contains this")
    args = ap.parse_args()
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()  # tiny-gpt2's config lacks bos/eos ids: HF warns of its defaults
    transformers.logging.disable_progress_bar()
    rows, failed = [], False
    for source in PRESETS + FIXTURES:
        preset = os.path.basename(source)  # a fixture's directory name: "tiny_qwen3" (the preset: "tiny-qwen3")
        if args.only not in preset.replace("_", "-"):
            continue
        for bf16 in (False, True):
            saved = "bfloat16" if bf16 else "float32"
            name = f"{preset}-{'bf16' if bf16 else 'f32'}"
            save = os.path.join(args.work, name)
            # A bf16 checkpoint twice: in bf16 (the numerics) and widened to f32 (the weights, sharply).
            for compute in ("saved", "f32") if bf16 else ("saved",):
                label = saved if compute == "saved" else f"{saved} in f32"
                try:
                    if compute == "saved":
                        iter_dir = train(args.build, source, bf16, save)
                        with open(os.path.join(iter_dir, "config.json")) as f:
                            config = json.load(f)
                        assert config.get("torch_dtype") == saved, "config.json torch_dtype is not " + saved
                    per, tol, scale = compare(args.build, args.work, name, save, iter_dir, config, compute)
                    diff, past = float(per.max()), int((per > tol).sum())
                    ok, note = diff <= tol, ""
                    if not ok and bf16 and compute == "saved" and routed(config):
                        ok = past <= (1 - ROUTING_SHARE) * per.size
                        note = f"{past} of {per.size} positions past it (expert choices on bf16 near-ties)"
                    rows.append((preset, label, f"{diff:.3e}", f"{tol:.3e}", f"{scale:.3f}", "PASS" if ok else "FAIL",
                                 note))
                except Exception as e:  # report the case and go on with the others
                    ok = False
                    rows.append((preset, label, "-", "-", "-", "FAIL", f"{type(e).__name__}: {e}".splitlines()[0][:200]))
                    print(f"== {name} ({label}): {type(e).__name__}: {e}", file=sys.stderr)
                failed = failed or not ok
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {cpu_name()}, {STEPS} steps of"
          f" --mock-data per checkpoint, logits of a ({BATCH}, {SEQ}) token batch")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}")
    head = ("model", "dtype", "max |dlogit|", "tolerance", "max |logit|", "result", "note")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
