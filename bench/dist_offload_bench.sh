#!/usr/bin/env bash
# Activation offload under sharding (docs/distributed.md, "Offload under sharding: the benchmark"):
# 2 ranks under mpirun, ZeRO-2 (--data-parallel-sharding-strategy optim_grads), one thread each, the
# same per-rank budget TIDAL_DEVICE_MEMORY for every run and the same global batch (8 x 512 tokens;
# accumulation makes up the micro-batch). The model is small-gpt2 (hidden 256, vocabulary 8192)
# with 12 layers, so that activations are most of a rank's memory. The budget is found first: what
# micro-batch 1 without offload and micro-batch 4 with it need per rank (the larger), halfway to what
# micro-batch 2 without offload needs. Then TIDAL_BENCH_ROUNDS interleaved rounds (default 2) of
#   mb1             the largest micro-batch that fits without offload
#   mb2             twice it, without offload: out of memory (a result, kept in the table)
#   mb2+offload     --activation-offload (all, to host)
#   mb4+offload
# and, as references without the budget (a budget near the peak makes the caching allocator give its
# cache back to the system and take it again when a request would cross it):
#   mb1, no budget
#   mb4+offload, no budget
#   mb4, no budget  what micro-batch 4 gives when memory does not limit it
# Prints a markdown table: tokens/s (the median, and each round's), every rank's device peak, rank
# 0's offload and gradient reduction figures. Usage: bench/dist_offload_bench.sh. TIDAL_BENCH_ITERS
# sets the steps per run (default 5; the first step of each run is left out of the medians).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build --target tidal >/dev/null
iters=${TIDAL_BENCH_ITERS:-5}
rounds=${TIDAL_BENCH_ROUNDS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base=(--model small-gpt2 --num-layers 12 --mock-data --seq-length 512 --attention flash --global-batch-size 8
      --data-parallel-sharding-strategy optim_grads
      --lr-warmup-iters 0 --log-interval 1000 --eval-interval 0 --no-progress --sample-tokens 0)
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -x TIDAL_NUM_THREADS=1)
launch=("${mpi[@]}" -np 2)
# shellcheck source=bench/bench_lib.sh
source bench/bench_lib.sh  # run, table

# The budget. Two steps each: the first has no optimizer states yet, the second has every peak. The
# allocated peak (not the reserved one, which the caching allocator lets grow while nothing limits
# it) of the larger rank.
run_iters=2 run probe-mb1
run_iters=2 mb=2 run probe-mb2
run_iters=2 mb=4 run probe-mb4-offload --activation-offload
limit=$(/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
need = lambda n: max(r["device_peak_bytes"] for r in json.load(open(f"{tmp}/{n}.json"))["summary"]["ranks"])
fits, oom = max(need("probe-mb1"), need("probe-mb4-offload")), need("probe-mb2")
if oom < fits * 1.1:
    sys.exit(f"dist_offload_bench: micro-batch 2 needs {oom >> 20} MiB per rank, micro-batch 1 and 4 with "
             f"offload {fits >> 20} MiB: no budget between them (change the model or the sequence)")
limit = ((fits + oom) // 2) >> 20 << 20
print(f"budget {limit >> 20} MiB per rank: micro-batch 1 and micro-batch 4 with offload need {fits / 2**20:.1f} MiB, "
      f"micro-batch 2 {oom / 2**20:.1f} MiB", file=sys.stderr)
print(limit)
PY
)
budget=(-x TIDAL_DEVICE_MEMORY="$limit")

for round in $(seq "$rounds"); do
  launch=("${mpi[@]}" "${budget[@]}" -np 2)
  run mb1
  mb=2 run mb2
  mb=2 run mb2+offload --activation-offload
  mb=4 run mb4+offload --activation-offload
  launch=("${mpi[@]}" -np 2)
  run "mb1, no budget"
  mb=4 run "mb4+offload, no budget" --activation-offload
  mb=4 run "mb4, no budget"
done
table "Offload under sharding: 2 ranks, ZeRO-2, TIDAL_DEVICE_MEMORY=$((limit >> 20))MiB per rank, small-gpt2 with 12 layers, seq 512, global batch 8, $rounds rounds ($(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores)" \
  mb1 mb2 mb2+offload mb4+offload "mb1, no budget" "mb4+offload, no budget" "mb4, no budget"
