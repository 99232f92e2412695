#!/usr/bin/env bash
# DeepSeek-V4 at long context on this machine (issue 30's table; docs/memory.md, "DeepSeek-V4 at long context"):
# a tiny-width V4 (bench/configs/deepseek_v4_long.json: hidden 64, 4 layers CSA/HCA/CSA/HCA with V4's rates m = 4
# and m' = 128, a 128-token window, index_topk 64, mHC with 4 streams, 8 experts top-2) trained on one sample of
# each length with each recompute and offload choice: the device peak, the activations' peak, the host's peak
# (offload) and the median step time. Prints a markdown table. Usage:
#   bench/deepseek_v4_long_context.sh [lengths...]   (default: 32768 65536)
# TIDAL_BENCH_ITERS steps a run (default 3; the first is not timed). Name the CPU beside the numbers.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build --target tidal >/dev/null
lengths=("$@")
[[ ${#lengths[@]} -gt 0 ]] || lengths=(32768 65536)
iters=${TIDAL_BENCH_ITERS:-3}
common=(--config bench/configs/deepseek_v4_long.json --mock-data --vocab-size 256 --micro-batch-size 1
        --global-batch-size 1 --train-iters "$iters" --lr-warmup-iters 0 --log-interval 1000 --eval-interval 0
        --no-progress --sample-tokens 0)
order=("none" "csa" "mhc" "csa + mhc" "full uniform 1" "offload core-attn + mhc" "offload layer-input + full")
declare -A modes=(
  ["none"]=""
  ["csa"]="--recompute-csa-attention"
  ["mhc"]="--mhc-recompute"
  ["csa + mhc"]="--recompute-csa-attention --mhc-recompute"
  ["full uniform 1"]="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
  ["offload core-attn + mhc"]="--activation-offload --offload-policy core-attn --mhc-recompute"
  ["offload layer-input + full"]="--activation-offload --offload-policy layer-input --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores"
for seq in "${lengths[@]}"; do
  for m in "${order[@]}"; do
    # shellcheck disable=SC2086
    build/tidal train "${common[@]}" --seq-length "$seq" ${modes[$m]} \
      --metrics-json "$tmp/$seq.$(echo "$m" | tr ' +-' '___').json" >/dev/null
  done
done
/usr/bin/python3 - "$tmp" "${#order[@]}" "${order[@]}" "${lengths[@]}" <<'PY'
import json, statistics, sys
tmp, n = sys.argv[1], int(sys.argv[2])
order, lengths = sys.argv[3:3 + n], sys.argv[3 + n:]
mib = lambda b: f"{b / 2**20:.0f}"
print("| tokens | mode | device peak (MiB) | activations peak (MiB) | host peak (MiB) | step (s) | step / none |")
print("|---|---|---|---|---|---|---|")
for seq in lengths:
    base = None
    for m in order:
        j = json.load(open(f"{tmp}/{seq}.{m.replace(' ', '_').replace('+', '_').replace('-', '_')}.json"))
        s = j["summary"]
        step = statistics.median(x["step_ms"] for x in j["steps"][1:]) / 1000
        base = base or step
        print(f"| {seq} | {m} | {mib(s['device_peak_bytes'])} | {mib(s['peak_bytes_by_category']['activation'])} "
              f"| {mib(s['host_peak_bytes'])} | {step:.1f} | {step / base:.2f} |")
PY
