#!/usr/bin/env bash
# The swap optimizer's cost against K:
# 1. one optimizer step over GPT-2 124M's parameters (bench/swap_optimizer_bench.cpp), AdamW with
#    device states and swapped at K = 1..32, TIDAL_BENCH_REPS interleaved runs, the fastest kept;
# 2. whole training steps of GPT-2 124M (mock data, 1 x 512 tokens), median step time and the
#    device peak of optimizer states.
# Prints markdown tables (docs/performance.md, "Swap optimizer"). Usage: bench/swap_optimizer_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build --target tidal tidal_bench >/dev/null
reps=${TIDAL_BENCH_REPS:-3}
iters=${TIDAL_BENCH_ITERS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
build/tidal_bench --benchmark_filter='BM_OptimizerStep' --benchmark_repetitions="$reps" \
  --benchmark_enable_random_interleaving=true --benchmark_format=json --benchmark_out="$tmp/step.json" >/dev/null
ks=(0 1 2 4 8 16 32)
for k in "${ks[@]}"; do
  swap=(); [ "$k" -gt 0 ] && swap=(--swap-optimizer --swap-optimizer-times "$k")
  build/tidal train --model gpt2-124m --mock-data --vocab-size 8192 --seq-length 512 --micro-batch-size 1 \
    --train-iters "$iters" --lr-warmup-iters 0 --log-interval 1000 --eval-interval 0 --no-progress \
    --sample-tokens 0 "${swap[@]}" --metrics-json "$tmp/train_$k.json" >/dev/null
done
/usr/bin/python3 - "$tmp" "${ks[@]}" <<'PY'
import collections, json, statistics, sys
tmp, ks = sys.argv[1], [int(k) for k in sys.argv[2:]]
runs = collections.defaultdict(list)
for b in json.load(open(f"{tmp}/step.json"))["benchmarks"]:
    if b.get("run_type") == "iteration":
        runs[int(b["run_name"].split("/")[1])].append(b)
name = lambda k: "AdamW (device states)" if k == 0 else f"swap, K = {k}"
print("Optimizer step, GPT-2 124M (f32, 949 MiB of states); fastest of the runs")
print("| optimizer | step ms (wall) | vs AdamW | device states (MiB) | moved per step (GB) |")
print("|---|---|---|---|---|")
base = min(r["real_time"] for r in runs[0])
for k in sorted(runs):
    r = runs[k]
    ms = min(x["real_time"] for x in r)
    print(f"| {name(k)} | {ms:.0f} | {ms / base:.2f} | {r[0]['device_states_MiB']:.0f} | {r[0].get('moved_GB_per_step', 0):.2f} |")
print()
print("Training step, GPT-2 124M, 1 x 512 tokens (median of steps 2..)")
print("| optimizer | step ms | vs AdamW | optimizer_state peak (MiB) | swap wait ms per step |")
print("|---|---|---|---|---|")
rows = []
for k in ks:
    j = json.load(open(f"{tmp}/train_{k}.json"))
    ms = statistics.median(s["step_ms"] for s in j["steps"][1:])
    wait = j["summary"].get("swap_optimizer", {}).get("wait_ms", 0)
    rows.append((k, ms, j["summary"]["peak_bytes_by_category"]["optimizer_state"], wait))
for k, ms, peak, wait in rows:
    print(f"| {name(k)} | {ms:.0f} | {ms / rows[0][1]:.2f} | {peak / 2**20:.0f} | {wait:.0f} |")
PY
