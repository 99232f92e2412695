#!/usr/bin/env bash
# Chunked loss against the default loss, for vocabularies of 32k and 151936 (Qwen3's):
# 1. the LM head + loss alone (bench/chunked_loss_bench.cpp: 2 x 1024 tokens, hidden 1024), each
#    case run TIDAL_BENCH_REPS times interleaved, the fastest kept; CPU time of all threads with
#    OMP_WAIT_POLICY=passive (idle threads sleep), which is what a shared machine measures reliably;
# 2. whole training steps of a 4-layer Qwen3-0.6B (hidden 1024, tied embeddings) on mock data,
#    2 x 1024 tokens: median step time (wall) and the device peak.
# Prints markdown tables (docs/performance.md, "Chunked loss"). Usage: bench/chunked_loss_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build --target tidal tidal_bench >/dev/null
reps=${TIDAL_BENCH_REPS:-3}
iters=${TIDAL_BENCH_ITERS:-4}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
OMP_WAIT_POLICY=passive build/tidal_bench --benchmark_filter='BM_LmHeadLoss' --benchmark_repetitions="$reps" \
  --benchmark_enable_random_interleaving=true --benchmark_format=json --benchmark_out="$tmp/head.json" >/dev/null
chunks=(0 512 1024 2048)
for v in 32768 151936; do
  for c in "${chunks[@]}"; do
    mode=(); [ "$c" -gt 0 ] && mode=(--loss-compute-mode chunk --loss-chunk-size "$c")
    build/tidal train --model qwen3-0.6b --num-layers 4 --mock-data --vocab-size "$v" --seq-length 1024 \
      --micro-batch-size 2 --train-iters "$iters" --lr-warmup-iters 0 --log-interval 1000 --eval-interval 0 \
      --no-progress --sample-tokens 0 "${mode[@]}" --metrics-json "$tmp/train_${v}_${c}.json" >/dev/null
  done
done
/usr/bin/python3 - "$tmp" "${chunks[@]}" <<'PY'
import collections, json, statistics, sys
tmp, chunks = sys.argv[1], [int(c) for c in sys.argv[2:]]
head = collections.defaultdict(list)
for b in json.load(open(f"{tmp}/head.json"))["benchmarks"]:
    if b.get("run_type") != "iteration":
        continue
    _, v, c = b["run_name"].split("/")[:3]
    head[(int(v), int(c))].append(b)
name = lambda c: "default" if c == 0 else f"chunk {c}"
print("LM head + loss, forward and backward (N = 2048 tokens, C = 1024); CPU ms = fastest of the runs")
print("| V | mode | CPU ms | vs default | logits peak (MiB) | head peak (MiB) |")
print("|---|---|---|---|---|---|")
for (v, c) in sorted(head):
    runs = head[(v, c)]
    cpu = min(r["cpu_time"] for r in runs)
    base = min(r["cpu_time"] for r in head[(v, 0)])
    print(f"| {v} | {name(c)} | {cpu:.0f} | {cpu / base:.3f} | {runs[0]['logits_MiB']:.0f} | {runs[0]['head_peak_MiB']:.0f} |")
print()
print("Training step, Qwen3-0.6B shape with 4 layers, 2 x 1024 tokens (median of steps 2.., wall time)")
print("| V | mode | step ms | vs default | device peak (MiB) | logits peak (MiB) |")
print("|---|---|---|---|---|---|")
for v in (32768, 151936):
    rows = []
    for c in chunks:
        j = json.load(open(f"{tmp}/train_{v}_{c}.json"))
        ms = statistics.median(s["step_ms"] for s in j["steps"][1:])
        rows.append((c, ms, j["summary"]["device_peak_bytes"], j["summary"]["peak_bytes_by_category"]["logits"]))
    for c, ms, peak, logits in rows:
        print(f"| {v} | {name(c)} | {ms:.0f} | {ms / rows[0][1]:.3f} | {peak / 2**20:.0f} | {logits / 2**20:.0f} |")
PY
