"""tidal against PyTorch on the same GPT-2 training step (driven by bench/compare_torch.sh; standard
library only). For each config, mode and dtype it runs tidal, PyTorch 2.x (the virtual environment's
python) and Debian's PyTorch 1.13 (/usr/bin/python3) one after the other in fresh processes, A B C
A B C ..., and prints a table of medians: step ms, tokens/s, achieved model GFLOP/s and its fraction
of the machine's GEMM rate in that dtype (the better of tidal's and PyTorch 2.x's GEMM on the 124M
MLP shape), peak RSS.

Model FLOPs per step (docs/performance.md, "Against PyTorch"): 6 N' tokens for the GEMMs (N' = the
parameters less the position embedding, which is a lookup; the tied head counted once) plus
6 L T d tokens for causal attention (QK^T and PV, forward and backward, halved by the mask).
Recompute's extra forward work is not counted: the figure is what the model needs.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CONFIGS = {
    # name: (tidal preset, vocab, hidden, layers, heads, positions, seq, batch)
    "small": ("small-gpt2", 8192, 256, 4, 4, 1024, 256, 8),
    "124m": ("gpt2-124m", 50257, 768, 12, 12, 1024, 512, 4),
}
# MoE configs: a Hugging Face config.json (under bench/), trained by tidal (--config) and by transformers 5.x
# (bench/torch_moe.py, PyTorch 2.x only: Debian's torch 1.13 has no transformers), without recompute.
MOE_CONFIGS = {
    # name: (config.json, seq, batch)
    "moe": ("configs/qwen3_moe_512.json", 256, 4),
}
TIDAL_MODES = {
    "none": [],
    "selective": ["--recompute-granularity", "selective"],
    "full": ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"],
    "act": ["--recompute-activation-function"],
}
HERE = os.path.dirname(os.path.abspath(__file__))


def shape_of(config):
    """(seq, batch) of a config."""
    if config in MOE_CONFIGS:
        return MOE_CONFIGS[config][1], MOE_CONFIGS[config][2]
    return CONFIGS[config][6], CONFIGS[config][7]


def moe_flops(config):
    """6 x the parameters a token meets (attention, router, its top-k experts, the LM head) x tokens, plus
    causal attention's 6 L T (heads x head_dim) tokens; the second value: every parameter."""
    path, seq, batch = MOE_CONFIGS[config]
    with open(os.path.join(HERE, path)) as f:
        c = json.load(f)
    d, hd, layers = c["hidden_size"], c["head_dim"], c["num_hidden_layers"]
    q, kv, e, f_ = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd, c["num_experts"], c["moe_intermediate_size"]
    attn = d * (2 * q + 2 * kv)
    active = layers * (attn + d * e + c["num_experts_per_tok"] * 3 * d * f_) + c["vocab_size"] * d
    params = layers * (attn + d * e + e * 3 * d * f_) + 2 * c["vocab_size"] * d
    tokens = seq * batch
    return 6 * active * tokens + 6 * layers * seq * q * tokens, params


def model_flops(config):
    if config in MOE_CONFIGS:
        return moe_flops(config)
    _, vocab, d, layers, _, positions, seq, batch = CONFIGS[config]
    params = vocab * d + positions * d + layers * (12 * d * d + 13 * d) + 2 * d
    tokens = batch * seq
    return 6 * (params - positions * d) * tokens + 6 * layers * seq * d * tokens, params


def timed(cmd, env):
    """Runs cmd under /usr/bin/time; returns (stdout, peak RSS bytes)."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        out = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss.name] + cmd, env=env, check=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True).stdout
        return out, int(rss.read().strip().splitlines()[-1]) * 1024


def run_tidal(tidal, config, mode, bf16, steps, warmup, env):
    seq, batch = shape_of(config)
    model = (["--config", os.path.join(HERE, MOE_CONFIGS[config][0])] if config in MOE_CONFIGS else
             ["--model", CONFIGS[config][0]])
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.json")
        cmd = [tidal, "train"] + model + ["--mock-data", "--seq-length", str(seq), "--micro-batch-size",
               str(batch), "--global-batch-size", str(batch), "--train-iters", str(steps), "--hidden-dropout", "0",
               "--attention-dropout", "0", "--eval-interval", "0", "--metrics-json", metrics] + TIDAL_MODES[mode]
        if bf16:
            cmd.append("--bf16")
        _, rss = timed(cmd, env)
        with open(metrics) as f:
            step_ms = [s["step_ms"] for s in json.load(f)["steps"]]
    return statistics.median(step_ms[warmup:]), rss


def run_torch(python, config, mode, bf16, steps, warmup, env, compile_model=False):
    if config in MOE_CONFIGS:
        path, seq, batch = MOE_CONFIGS[config]
        cmd = [python, os.path.join(HERE, "torch_moe.py"), "--config", os.path.join(HERE, path), "--seq", str(seq),
               "--batch", str(batch), "--steps", str(steps), "--warmup", str(warmup)] + (["--bf16"] if bf16 else [])
        out, rss = timed(cmd, env)
        return json.loads(out.strip().splitlines()[-1])["median_step_ms"], rss
    _, vocab, d, layers, heads, positions, seq, batch = CONFIGS[config]
    cmd = [python, os.path.join(HERE, "torch_gpt2.py"), "--vocab", str(vocab), "--hidden", str(d), "--layers",
           str(layers), "--heads", str(heads), "--positions", str(positions), "--seq", str(seq), "--batch", str(batch),
           "--steps", str(steps), "--warmup", str(warmup), "--mode", mode]
    if bf16:
        cmd.append("--bf16")
    if compile_model:
        cmd.append("--compile")
    out, rss = timed(cmd, env)
    return json.loads(out.strip().splitlines()[-1])["median_step_ms"], rss


def gemm_rates(python, env):
    """GFLOP/s of PyTorch 2.x's GEMM on the 124M MLP shape, fp32 and bf16, 2 threads."""
    code = """
import json, time, torch
torch.set_num_threads(2)
out = {}
for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
    a, b = torch.randn(2048, 768, dtype=dt), torch.randn(768, 3072, dtype=dt)
    for _ in range(3): a @ b
    best = 1e9
    for _ in range(10):
        t = time.perf_counter(); a @ b; best = min(best, time.perf_counter() - t)
    out[name] = 2 * 2048 * 768 * 3072 / best / 1e9
print(json.dumps(out))
"""
    return json.loads(subprocess.run([python, "-c", code], env=env, check=True, stdout=subprocess.PIPE,
                                     text=True).stdout)


def tidal_gemm_rates(bench, env):
    """GFLOP/s of tidal's GEMM (oneDNN sgemm / bf16 matmul) on the same shape, from tidal_bench."""
    out = subprocess.run([bench, "--benchmark_filter=BM_Gemm(F32|Bf16)/2048/3072/768/0", "--benchmark_min_time=0.3",
                          "--benchmark_format=json"], env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    rates = {}
    for b in json.loads(out)["benchmarks"]:
        rates["fp32" if b["name"].startswith("BM_GemmF32") else "bf16"] = b["GFLOP/s"]
    return rates


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tidal", required=True)
    ap.add_argument("--tidal-bench", required=True, help="build/tidal_bench (tidal's GEMM rate)")
    ap.add_argument("--torch2", required=True, help="python of the PyTorch 2.x virtual environment")
    ap.add_argument("--torch1", default="", help="Debian's python3 with torch 1.13 (empty: left out)")
    ap.add_argument("--configs", default="small,124m,moe")
    ap.add_argument("--modes", default="none,selective,full,act")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="A B C rounds per row")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile", action="store_true",
                    help="a 'torch 2.x compile' side too: torch.compile'd GPT-2 (its compilation in the warm-up steps)")
    a = ap.parse_args()

    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads),
               OPENBLAS_NUM_THREADS=str(a.threads), TIDAL_NUM_THREADS=str(a.threads), OMP_WAIT_POLICY="passive")
    # The machine's GEMM rate per dtype: the better of the two libraries on the 124M MLP's shape.
    theirs, ours = gemm_rates(a.torch2, env), tidal_gemm_rates(a.tidal_bench, env)
    rates = {dt: max(theirs[dt], ours[dt]) for dt in ("fp32", "bf16")}
    print(f"GEMM rate (2048x768 @ 768x3072, {a.threads} threads): fp32 {rates['fp32']:.0f} GFLOP/s, "
          f"bf16 {rates['bf16']:.0f} GFLOP/s (the better of tidal's fp32 {ours['fp32']:.0f} / bf16 "
          f"{ours['bf16']:.0f} and PyTorch 2.x's {theirs['fp32']:.0f} / {theirs['bf16']:.0f})", flush=True)
    # A first run outside the table: page cache, the oneDNN kernels' first generation.
    run_tidal(a.tidal, a.configs.split(",")[0], "none", False, 2, 0, env)
    sides = [("tidal", lambda *r: run_tidal(a.tidal, *r, a.steps, a.warmup, env)),
             ("torch 2.x", lambda *r: run_torch(a.torch2, *r, a.steps, a.warmup, env))]
    if a.compile:
        sides.append(("torch 2.x compile", lambda *r: run_torch(a.torch2, *r, a.steps, a.warmup, env, True)))
    if a.torch1:
        sides.append(("torch 1.13", lambda *r: run_torch(a.torch1, *r, a.steps, a.warmup, env)))
    header = ("| config | dtype | recompute | side | step ms | tokens/s | GFLOP/s | of GEMM rate | peak RSS MiB |"
              " tidal speed-up |")
    print(header + "\n|" + "---|" * 10, flush=True)
    started = time.time()
    for config in a.configs.split(","):
        flops, _ = model_flops(config)
        seq, batch = shape_of(config)
        tokens = seq * batch
        for dtype in a.dtypes.split(","):
            for mode in a.modes.split(","):
                if config in MOE_CONFIGS and mode != "none":
                    continue  # bench/torch_moe.py recomputes nothing
                # The MoE rows compare with transformers on PyTorch 2.x only (Debian's torch 1.13 has no
                # transformers; bench/torch_moe.py does not compile).
                here = [(n, r) for n, r in sides if not (config in MOE_CONFIGS and n != "tidal" and n != "torch 2.x")]
                results = {name: ([], []) for name, _ in here}
                for _ in range(a.rounds):
                    for name, run in here:
                        ms, rss = run(config, mode, dtype == "bf16")
                        results[name][0].append(ms)
                        results[name][1].append(rss)
                tidal_ms = statistics.median(results["tidal"][0])
                for name, _ in here:
                    ms = statistics.median(results[name][0])
                    gflops = flops / ms / 1e6
                    print(f"| {config} | {dtype} | {mode} | {name} | {ms:.0f} | {tokens / ms * 1e3:.0f} | {gflops:.0f} |"
                          f" {gflops / rates[dtype]:.0%} | {max(results[name][1]) / 2**20:.0f} |"
                          f" {'' if name == 'tidal' else f'{ms / tidal_ms:.2f}x'} |", flush=True)
    print(f"({time.time() - started:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
