#!/usr/bin/env bash
# How long tidal plan takes to answer for a large MoE model (issue 32's targets: the 8-rank plan under
# 30 s, the 16-rank 32k plan under 60 s on a 2-core machine): each plan with its dry runs on one process
# (TIDAL_PLAN_JOBS=1) and on every core, the wall time and the phases' times (the search's last stderr
# line), and whether both answers are the same. Usage: bench/plan_speed.sh [quick|full] (quick: the
# 8-rank plan only). Name the CPU beside the numbers; run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build --target tidal >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores"
plans=("qwen3-30b-a3b 8 ranks, 4096 tokens|--model qwen3-30b-a3b --mock-data --bf16 --seq-length 4096 --micro-batch-size 1 --global-batch-size 8 --device h100 --data-parallel-size 8")
if [[ "${1:-quick}" == full ]]; then
  plans+=("qwen3-30b-a3b 16 ranks, 32768 tokens|--model qwen3-30b-a3b --mock-data --bf16 --seq-length 32768 --attention flash --micro-batch-size 1 --global-batch-size 16 --device h100 --data-parallel-size 16")
fi
for entry in "${plans[@]}"; do
  name=${entry%%|*}
  read -r -a flags <<<"${entry#*|}"
  for jobs in 1 "$(nproc)"; do
    start=$(date +%s%N)
    TIDAL_PLAN_JOBS=$jobs build/tidal plan "${flags[@]}" >"$tmp/out.$jobs" 2>"$tmp/err.$jobs" || true
    end=$(date +%s%N)
    printf '%-36s %2s process(es): %7.1f s wall; %s\n' "$name" "$jobs" "$(((end - start) / 1000000))e-3" \
      "$(grep 'searched in' "$tmp/err.$jobs" | sed 's/^tidal plan: //')"
  done
  if cmp -s "$tmp/out.1" "$tmp/out.$(nproc)"; then echo "  the same plan on 1 and $(nproc) processes"; else
    echo "  DIFFERENT plans on 1 and $(nproc) processes:"; diff "$tmp/out.1" "$tmp/out.$(nproc)" | head -20
  fi
done
