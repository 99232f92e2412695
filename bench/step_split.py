"""Where a training step's time goes, from `tidal train --profile DIR` runs (docs/performance.md,
"bf16 training step"): each op's self time on the compute lane (summary.json's `ops`, nested ops
subtracted) grouped into GEMM, attention, loss, norms, activations, optimizer and other ops; the
rest of the profiled window's wall time, spent outside every op (the autograd engine, the
allocator, the data loader, logging), is "framework". Per step, in ms, one column per DIR.

Usage: python3 bench/step_split.py LABEL=DIR [LABEL=DIR ...]
"""
import json
import os
import sys

GROUPS = [
    ("GEMM", ("linear", "LinearBackward", "matmul", "MatmulBackward", "MmBackward", "BmmBackward")),
    ("attention", ("scaled_dot_product_attention", "FlashAttentionBackward", "EagerAttentionBackward",
                   "attention")),
    ("loss", ("cross_entropy", "CrossEntropyBackward", "chunked_lm_loss", "ChunkedLmLossBackward")),
    ("norms", ("layer_norm", "LayerNormBackward", "rms_norm", "RmsNormBackward")),
    ("activations", ("gelu", "GeluBackward", "silu", "SiluBackward", "swiglu", "SwigluBackward")),
    ("optimizer", ("adamw", "clip_grad_norm", "grad_norm", "zero_grad")),
]


def group_of(name):
    if name == "backward":  # the autograd engine's own time between backward nodes
        return "framework"
    for group, names in GROUPS:
        if name in names:
            return group
    return "other ops"


def split(directory):
    with open(os.path.join(directory, "summary.json")) as f:
        s = json.load(f)
    steps = max(1, len(s["steps"]))
    out = {}
    for op in s["ops"]:
        g = group_of(op["name"])
        out[g] = out.get(g, 0.0) + op["self_ms"] / steps
    out["framework"] = out.get("framework", 0.0) + max(0.0, s["duration_ms"] / steps - sum(out.values()))
    return out, s["duration_ms"] / steps


def main():
    runs = [arg.split("=", 1) for arg in sys.argv[1:]]
    if not runs or any(len(r) != 2 for r in runs):
        sys.exit(__doc__)
    results = [(label,) + split(d) for label, d in runs]
    rows = [g for g, _ in GROUPS] + ["other ops", "framework"]
    print("| ms per step | " + " | ".join(label for label, _, _ in results) + " |")
    print("|---|" + "---:|" * len(results))
    for row in rows:
        cells = [f"{r.get(row, 0.0):.1f} ({r.get(row, 0.0) / total:.0%})" for _, r, total in results]
        print(f"| {row} | " + " | ".join(cells) + " |")
    print("| **step** | " + " | ".join(f"**{total:.1f}**" for _, _, total in results) + " |")


if __name__ == "__main__":
    main()
