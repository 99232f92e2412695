#!/usr/bin/env bash
# How much of the exchanges between ranks the compute hides, read from the profiler's trace
# (docs/distributed.md, "The exchanges' overlap: the benchmark"). Two ranks under mpirun, one compute
# thread each:
#   cp2   context parallel (--context-parallel-size 2): ring attention's K/V blocks (and backward's
#         dK/dV) travel on a worker thread while the current block computes (the "cp ring" lane);
#         each layer's last dK/dV exchange, going home, blocks (ranges of kind comm)
#   ep2   expert parallel (--expert-model-parallel-size 2): the MoE all-to-all blocks (kind comm)
# Each run profiles steps 2-3 (TIDAL_BENCH_ITERS sets the steps, default 3) and the table gives, per
# profiled step: the step, the ring exchanges' busy time on the worker and the part of it that
# overlapped compute, what the compute thread waited for them, and what it spent blocked in exchanges. Sizes:
# TIDAL_BENCH_SEQ (default 2048 tokens, CP) and TIDAL_BENCH_MOE_SEQ (default 512, EP).
# Usage: bench/exchange_overlap_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build --target tidal >/dev/null
iters=${TIDAL_BENCH_ITERS:-3}
seq=${TIDAL_BENCH_SEQ:-2048}
moe_seq=${TIDAL_BENCH_MOE_SEQ:-512}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -x TIDAL_NUM_THREADS=1 -np 2)
common=(--mock-data --attention flash --train-iters "$iters" --lr-warmup-iters 0 --log-interval 1000
        --eval-interval 0 --no-progress --sample-tokens 0 --profile-steps "2:$iters")
run() {  # NAME FLAGS...: a profiled run, its summary in $tmp/NAME/summary.json
  local name=$1
  shift
  "${mpi[@]}" build/tidal train "${common[@]}" --profile "$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 ||
    { cat "$tmp/$name.log"; exit 1; }
}
run cp2 --model small-gpt2 --seq-length "$seq" --max-position-embeddings "$seq" --micro-batch-size 1 --global-batch-size 1 --context-parallel-size 2
run ep2 --model tiny-qwen3-moe --hidden-size 256 --moe-ffn-hidden-size 512 --seq-length "$moe_seq" --max-position-embeddings "$moe_seq" \
  --micro-batch-size 2 --global-batch-size 4 --expert-model-parallel-size 2
/usr/bin/python3 - "$tmp" "$seq" "$moe_seq" <<'PY'
import json, sys
tmp, seq, moe_seq = sys.argv[1], sys.argv[2], sys.argv[3]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"\nExchanges between 2 ranks (rank 0's profile, per step; CPU: {cpu})\n")
print("| run | step (ms) | ring exchanges on the worker (ms) | of it overlapped with compute | compute waited for them (ms) | blocked in exchanges (ms) | exchanges' share of the step |")
print("|---|---|---|---|---|---|---|")
for name, what in (("cp2", f"CP 2, small-gpt2, {seq} tokens"), ("ep2", f"EP 2, qwen3-moe hidden 256, 2 x {moe_seq} tokens")):
    s = json.load(open(f"{tmp}/{name}/summary.json"))
    n = len(s["steps"])
    step = sum(x["ms"] for x in s["steps"]) / n
    ring = next((x for x in s["streams"] if x["stream"] == "cp ring"), None)
    busy = ring["busy_ms"] / n if ring else 0.0
    frac = f"{100 * ring['overlap_fraction']:.0f}%" if ring else "-"
    wait, comm = s["compute_wait_ms"] / n, s["compute_comm_ms"] / n
    print(f"| {what} | {step:.1f} | {busy:.2f} | {frac} | {wait:.2f} | {comm:.2f} | {100 * (wait + comm) / step:.1f}% |")
PY
