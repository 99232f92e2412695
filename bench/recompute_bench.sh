#!/usr/bin/env bash
# Recompute modes side by side on one fixed GPT config (12 layers, hidden 768, 12 heads, seq 1024,
# micro-batch 1, eager attention, dropout 0.1, mock data with an 8192-token vocabulary): the median
# step time over TIDAL_BENCH_ROUNDS interleaved rounds, its ratio to no recompute, and the peak of
# activation memory. Prints a markdown table (docs/performance.md, "Recompute"). Usage: bench/recompute_bench.sh [extra tidal train flags]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build --target tidal >/dev/null
iters=${TIDAL_BENCH_ITERS:-5}
common=(--model gpt2-124m --mock-data --vocab-size 8192 --seq-length 1024 --micro-batch-size 1 --attention eager
        --train-iters "$iters" --lr-warmup-iters 0 --log-interval 1000 --eval-interval 0 --no-progress
        --sample-tokens 0 "$@")
declare -A modes=(
  ["none"]=""
  ["selective (core_attn)"]="--recompute-granularity selective"
  ["full uniform 1"]="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
  ["full block 6"]="--recompute-granularity full --recompute-method block --recompute-num-layers 6"
  ["activation-function"]="--recompute-activation-function"
  ["norm"]="--recompute-norm"
)
order=("none" "selective (core_attn)" "full uniform 1" "full block 6" "activation-function" "norm")
tmp=$(mktemp -d)
# TIDAL_BENCH_ROUNDS rounds (default 2) through all modes: a burst of load on the shared host then
# hits every mode in some round, and each mode's median is over the steps of all its rounds.
rounds=${TIDAL_BENCH_ROUNDS:-2}
for r in $(seq "$rounds"); do
  for m in "${order[@]}"; do
    # shellcheck disable=SC2086
    build/tidal train "${common[@]}" ${modes[$m]} --metrics-json "$tmp/$(echo "$m" | tr ' ()' '___').$r.json" >/dev/null
  done
done
/usr/bin/python3 - "$tmp" "${order[@]}" <<'PY'
import glob, json, statistics, sys
tmp, order = sys.argv[1], sys.argv[2:]
rows = []
for m in order:
    name = m.replace(' ', '_').replace('(', '_').replace(')', '_')
    runs = [json.load(open(p)) for p in sorted(glob.glob(f"{tmp}/{name}.*.json"))]
    # The first step of each run pays for first-touch page faults.
    steps = [s["step_ms"] for j in runs for s in j["steps"][1:]]
    rc = statistics.mean(j["summary"]["recompute"]["recompute_ms"] / len(j["steps"]) for j in runs)
    rows.append((m, statistics.median(steps), runs[0]["summary"]["peak_bytes_by_category"]["activation"], rc))
base_ms, base_act = rows[0][1], rows[0][2]
print("| mode | median step (ms) | ratio to none | recompute per step (ms) | peak activations (MiB) | ratio |")
print("|---|---|---|---|---|---|")
for m, ms, act, rc in rows:
    print(f"| {m} | {ms:.0f} | {ms / base_ms:.2f} | {rc:.0f} | {act / 2**20:.0f} | {act / base_act:.2f} |")
PY
rm -rf "$tmp"
