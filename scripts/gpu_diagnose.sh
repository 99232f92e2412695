#!/usr/bin/env bash
# Where a GPU step's time and memory go, for the cases scripts/gpu_check.sh found slow or off: run in
# the same device call after it (it uses the binaries and libraries gpu_check.sh unpacked):
#
#   GPU_CHECK_STEPS=tests bash scripts/gpu_check.sh; bash scripts/gpu_diagnose.sh
#
# 1. Kernel time: Nsight Compute (`ncu`, on the image; clocks left as they are) times every kernel of
#    two GPT-2 124M bf16 steps (8 x 1024 tokens); the table sums them by kernel, beside the step's wall
#    time: what the GPU computes against what the host adds (launches, synchronizations).
# 2. Host waits: the profile of a plain GPT-2 step, each op's self time on the host.
# 3. Copy bandwidth between host and device, pinned and pageable (PyTorch), the ceiling of offload.
# 4. Offload: the profile of GPT-2 with --activation-offload (copies against compute).
# 5. With GPU_DIAGNOSE_TIMELINES=1, memory: the allocation timelines (`--profile`'s memory_timeline.csv)
#    of the tiny runs whose device peak differed from the dry run's (tests/cuda/training_test.cpp).
#
# Writes $OUT/diagnose.log (and the timelines); every step is bounded by `timeout`
# and the whole script by GPU_DIAGNOSE_SECONDS (240).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/.gpu/out}
SCRATCH=${GPU_SCRATCH:-/tmp/gpucheck}
PREFIX=${GPU_PREFIX:-/tmp/gpuprefix}
BUDGET=${GPU_DIAGNOSE_SECONDS:-240}
START=$(date +%s)
mkdir -p "$OUT"
BIN=$(cat "$SCRATCH/bin" 2>/dev/null) || { echo "run scripts/gpu_check.sh first (no $SCRATCH/bin)"; exit 1; }
LIBS=$PREFIX/usr/lib/x86_64-linux-gnu:$PREFIX/lib/x86_64-linux-gnu
[ -f "$SCRATCH/cuda_libs" ] && LIBS=$LIBS$(sed -n 2p "$SCRATCH/cuda_libs")
export LD_LIBRARY_PATH=$LIBS:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for d in /opt/torch/.venv/bin /usr/local/cuda/bin /opt/nvidia/nsight-compute/*/; do [ -d "$d" ] && PATH=$PATH:$d; done
export PATH

left() { echo $((BUDGET - ($(date +%s) - START))); }
# run NAME LIMIT COMMAND...: under timeout, at most what is left.
run() {
  local name=$1 limit=$2
  shift 2
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  if [ "$limit" -lt 10 ]; then
    echo "=== $name: skipped (out of time)"
    return 1
  fi
  echo "=== $name (timeout ${limit}s)"
  timeout --kill-after=5 "$limit" "$@"
  echo "=== $name: exit $?"
}

TRAIN=("$BIN/tidal" train --device cuda --mock-data --hidden-dropout 0 --attention-dropout 0 --eval-interval 0)
GPT2=(--model gpt2-124m --seq-length 1024 --micro-batch-size 8 --global-batch-size 8 --bf16)

main() {
  echo "gpu_diagnose: $(date -u +%FT%TZ), budget ${BUDGET}s, binaries in $BIN"

  # 1. Kernel times of two GPT-2 steps, summed by kernel name.
  run ncu-gpt2 120 ncu --clock-control none --metrics gpu__time_duration.sum --launch-count 6000 \
    -f -o "$SCRATCH/gpt2" "${TRAIN[@]}" "${GPT2[@]}" --train-iters 2 --log-interval 1 >"$SCRATCH/ncu_run.log" 2>&1
  tail -5 "$SCRATCH/ncu_run.log"
  if [ -f "$SCRATCH/gpt2.ncu-rep" ]; then
    ncu --import "$SCRATCH/gpt2.ncu-rep" --csv --page raw --metrics gpu__time_duration.sum >"$SCRATCH/ncu.csv" 2>&1
    python3 - "$SCRATCH/ncu.csv" <<'EOF'
import csv, collections, sys
rows = list(csv.reader(open(sys.argv[1])))
head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
cols = rows[head]
name_i, time_i = cols.index("Kernel Name"), cols.index("gpu__time_duration.sum")
data = [r for r in rows[head + 1:] if len(r) == len(cols) and r[time_i].replace(".", "").replace(",", "").isdigit()]
unit = rows[head + 1][time_i]  # the units row: ns, us or ms (msecond, ...)
to_ns = next((f for u, f in (("n", 1.0), ("u", 1e3), ("m", 1e6), ("s", 1e9)) if unit.startswith(u)), 1.0)
ns = [(r[name_i], float(r[time_i].replace(",", "")) * to_ns) for r in data]
half = len(ns) // 2  # the second step's kernels are (about) the second half
tot = collections.defaultdict(lambda: [0, 0.0])
for name, t in ns:
    tot[name][0] += 1
    tot[name][1] += t
all_ms = sum(t for _, t in ns) / 1e6
print(f"kernels: {len(ns)} launches in 2 steps, {all_ms:.1f} ms of GPU time (unit of the column: {unit});"
      f" the second half: {len(ns) - half} launches, {sum(t for _, t in ns[half:]) / 1e6:.1f} ms")
print(f"{'kernel':<90}{'launches':>9}{'ms':>9}")
for name, (c, t) in sorted(tot.items(), key=lambda kv: -kv[1][1]):
    print(f"{name[:88]:<90}{c:>9}{t / 1e6:>9.2f}")
EOF
  fi

  # 2. Where the host waits: the profile of a plain GPT-2 step (self time of each op on the host, which
  #    the asynchronous launches keep small unless the op synchronizes or allocates and waits).
  run profile-gpt2 90 "${TRAIN[@]}" "${GPT2[@]}" --train-iters 3 --log-interval 1 --profile "$SCRATCH/plain" \
    --profile-steps 3:3 >"$SCRATCH/plain.log" 2>&1
  tail -3 "$SCRATCH/plain.log"
  "$BIN/tidal" report "$SCRATCH/plain" 2>&1 | sed -n '/time by op/,$p' | head -30

  # 3. Host <-> device copy bandwidth (what offload's copies can reach), pinned and pageable, via PyTorch.
  run bandwidth 60 python3 - <<'PY'
import time, torch
n = 1 << 28  # 256 MiB
dev = torch.empty(n, dtype=torch.uint8, device="cuda")
for pinned in (True, False):
    host = torch.empty(n, dtype=torch.uint8, pin_memory=pinned)
    for name, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
        dst.copy_(src, non_blocking=pinned); torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(5):
            dst.copy_(src, non_blocking=pinned)
        torch.cuda.synchronize()
        print(f"{'pinned' if pinned else 'pageable'} {name}: {5 * n / (time.perf_counter() - t) / 1e9:.1f} GB/s")
PY

  # 4. The offload run's profile: copies against compute.
  run offload-profile 90 "${TRAIN[@]}" "${GPT2[@]}" --activation-offload --train-iters 3 --log-interval 1 \
    --profile "$SCRATCH/offload" --profile-steps 3:3 >"$SCRATCH/offload.log" 2>&1
  tail -4 "$SCRATCH/offload.log"
  "$BIN/tidal" report "$SCRATCH/offload" 2>&1 | sed -n '/time by op/,$p' | head -20

  # 5. With GPU_DIAGNOSE_TIMELINES=1: the allocation timelines of tiny runs whose device peak differed
  #    from the dry run's (tests/cuda/training_test.cpp), to compare with the dry run's.
  local i=0
  [ "${GPU_DIAGNOSE_TIMELINES:-0}" = 1 ] && for flags in "--model tiny-gpt2 --activation-offload" \
    "--model tiny-gpt2 --bf16" "--model tiny-qwen3-moe --loss-compute-mode chunk --loss-chunk-size 16"; do
    i=$((i + 1))
    # shellcheck disable=SC2086  # $flags: several flags
    run "timeline-$i" 30 "${TRAIN[@]}" $flags --seq-length 32 --micro-batch-size 2 --global-batch-size 2 \
      --train-iters 2 --lr-warmup-iters 0 --log-interval 100 --profile "$SCRATCH/prof$i" --profile-steps 1:2
    [ -f "$SCRATCH/prof$i/memory_timeline.csv" ] && cp "$SCRATCH/prof$i/memory_timeline.csv" "$OUT/timeline$i.csv"
    echo "timeline$i.csv: $flags"
  done
  echo "gpu_diagnose: done in $(($(date +%s) - START)) s"
}

main 2>&1 | tee "$OUT/diagnose.log"
