#!/usr/bin/env bash
# Activation offload, measured in one run (docs/offload.md and docs/performance.md, "Offload").
# Three tables, each from `tidal train --metrics-json` runs side by side on mock data (vocabulary 8192):
#   1. Overlap: GPT-2 124M shape, seq 1024, micro-batch 1, flash attention: step time and peak with
#      and without offload, copy time, time compute waited, overlap fraction.
#   2. Long sequence: the same model at seq 2048 with eager attention: core-attn offload versus
#      selective (core attention) recompute, step times and peaks.
#   3. Memory for throughput: under an emulated device limit (TIDAL_DEVICE_MEMORY) where micro-batch
#      1 is the most that fits without offload, offload lets micro-batch 4 fit: tokens/s of both.
# Usage: bench/offload_bench.sh [overlap|long|throughput|all] (default all). TIDAL_BENCH_ITERS sets
# the steps per run (default 5; the first step is left out of the medians).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build --target tidal >/dev/null
what=${1:-all}
iters=${TIDAL_BENCH_ITERS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base=(--model gpt2-124m --mock-data --vocab-size 8192
      --lr-warmup-iters 0 --log-interval 1000 --eval-interval 0 --no-progress --sample-tokens 0)

# shellcheck source=bench/bench_lib.sh
source bench/bench_lib.sh  # run, table

if [[ $what == all || $what == overlap ]]; then
  o=(--seq-length 1024 --attention flash)
  run none "${o[@]}"
  run offload-all "${o[@]}" --activation-offload
  run offload-all-depth-2 "${o[@]}" --activation-offload --offload-prefetch-depth 2
  run full-uniform-1 "${o[@]}" --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
  run full-uniform-1+layer-input "${o[@]}" --recompute-granularity full --recompute-method uniform \
    --recompute-num-layers 1 --activation-offload --offload-policy layer-input
  run offload-all-to-disk "${o[@]}" --activation-offload --offload-target disk --offload-dir "$tmp"
  table "Overlap: gpt2-124m shape, seq 1024, micro-batch 1, flash attention" none offload-all offload-all-depth-2 \
    full-uniform-1 full-uniform-1+layer-input offload-all-to-disk
fi

if [[ $what == all || $what == long ]]; then
  l=(--seq-length 2048 --max-position-embeddings 2048 --attention eager)
  run eager-none "${l[@]}"
  run selective-recompute "${l[@]}" --recompute-granularity selective
  run core-attn-offload "${l[@]}" --activation-offload --offload-policy core-attn
  table "Long sequence: gpt2-124m shape, seq 2048, micro-batch 1, eager attention, dropout 0.1" eager-none \
    selective-recompute core-attn-offload
fi

if [[ $what == all || $what == throughput ]]; then
  t=(--seq-length 1024 --attention flash --global-batch-size 4)
  # Find the limit: what micro-batch 1 needs without offload, and micro-batch 4 with it.
  run_iters=2 run probe-mb1 "${t[@]}"
  run_iters=2 mb=4 run probe-mb4-offload "${t[@]}" --activation-offload
  limit=$(/usr/bin/python3 -c "
import json, sys
need = max(json.load(open(f'$tmp/{n}.json'))['summary']['device_peak_reserved_bytes'] for n in ('probe-mb1', 'probe-mb4-offload'))
print(int(need * 1.05) + (8 << 20))")
  export TIDAL_DEVICE_MEMORY=$limit
  run mb1 "${t[@]}"
  mb=4 run mb4 "${t[@]}"
  mb=4 run mb4+offload "${t[@]}" --activation-offload
  unset TIDAL_DEVICE_MEMORY
  table "Memory for throughput: TIDAL_DEVICE_MEMORY=$((limit >> 20))MiB, gpt2-124m shape, seq 1024, global batch 4" \
    mb1 mb4 mb4+offload
fi
