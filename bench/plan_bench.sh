#!/usr/bin/env bash
# tidal plan's step times against measured ones on this machine (docs/planning.md, "The check on this
# CPU"). Calibrates this machine (or takes TIDAL_PLAN_PROFILE), asks `tidal plan --json` for the
# candidates of the 124M shape under a budget the given run does not fit, trains a spread of them
# (the chosen one, the Pareto front, and others across recompute, offload, the swap optimizer and the
# micro-batch; at least 12) for TIDAL_BENCH_ITERS steps each, and prints predicted against measured
# median step times, the median absolute error, and how far the chosen candidate is from the fastest
# measured one that fits. Usage: bench/plan_bench.sh [extra tidal train flags, e.g. --bf16]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build --target tidal >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
iters=${TIDAL_BENCH_ITERS:-4}
budget=${TIDAL_PLAN_BUDGET:-3GiB}
count=${TIDAL_PLAN_CANDIDATES:-14}
profile=${TIDAL_PLAN_PROFILE:-}
if [[ -z "$profile" ]]; then
  profile="$tmp/profile.json"
  build/tidal plan --calibrate --profile-out "$profile" >&2
fi
base=(--model gpt2-124m --mock-data --seq-length 512 "$@")
batch=(--micro-batch-size 4 --global-batch-size 8)
given=("${base[@]}" "${batch[@]}")
build/tidal plan "${given[@]}" --device "$profile" --memory "$budget" --json >"$tmp/plan.json" || true
run=(--train-iters "$iters" --lr-warmup-iters 0 --log-interval 1000 --eval-interval 0 --no-progress --sample-tokens 0)
/usr/bin/python3 - "$tmp" "$count" <<'PY' >"$tmp/picked.txt"
import json, sys
tmp, count = sys.argv[1], int(sys.argv[2])
plan = json.load(open(f"{tmp}/plan.json"))
cands = [c for c in plan["candidates"] if c["step_ms"] is not None]
picked, seen = [], set()
def take(c):
    if c["flags"] not in seen and len(picked) < count:
        seen.add(c["flags"]); picked.append(c)
if plan["chosen"]: take(plan["chosen"])
for c in cands:
    if c["pareto"]: take(c)
# then a spread over the rest: every k-th by predicted time
rest = [c for c in cands if c["flags"] not in seen]
step = max(1, len(rest) // max(1, count - len(picked)))
for c in rest[::step]: take(c)
for c in picked: print(c["flags"])
PY
i=0
while IFS= read -r flags; do
  # A candidate's flags replace the given batch flags when they change the micro-batch.
  if [[ "$flags" == *--micro-batch-size* ]]; then cmd=("${base[@]}"); else cmd=("${given[@]}"); fi
  # shellcheck disable=SC2086
  build/tidal train "${cmd[@]}" "${run[@]}" $flags --metrics-json "$tmp/run.$i.json" >/dev/null
  i=$((i + 1))
done <"$tmp/picked.txt"
/usr/bin/python3 - "$tmp" "$i" <<'PY'
import json, statistics, sys
tmp, n = sys.argv[1], int(sys.argv[2])
plan = json.load(open(f"{tmp}/plan.json"))
by_flags = {c["flags"]: c for c in plan["candidates"]}
flags = open(f"{tmp}/picked.txt").read().splitlines()
rows = []
for k, f in enumerate(flags[:n]):
    run = json.load(open(f"{tmp}/run.{k}.json"))
    measured = statistics.median(s["step_ms"] for s in run["steps"][1:])  # the first step pays first touches
    c = by_flags[f]
    rows.append((f or "(as given)", c["step_ms"], measured, c["fits"], c["device_peak_bytes"],
                 run["summary"]["peak_bytes"] if "peak_bytes" in run["summary"] else None))
print(f"profile: {plan['profile']['name']} ({plan['profile']['source']}); budget {plan['budget_bytes'] / 2**30:.2f} GiB")
print("| candidate | fits | predicted (ms) | measured (ms) | predicted / measured |")
print("|---|---|---|---|---|")
for f, p, m, fits, _, _ in rows:
    print(f"| `{f}` | {'yes' if fits else 'no'} | {p:.0f} | {m:.0f} | {p / m:.2f} |")
errors = [abs(p / m - 1) for _, p, m, _, _, _ in rows]
print(f"\nmedian absolute error: {100 * statistics.median(errors):.1f}% over {len(rows)} candidates")
fitting = [(m, f) for f, p, m, fits, _, _ in rows if fits]
if plan["chosen"] and fitting:
    chosen = next(m for f, p, m, *_ in rows if f == (plan["chosen"]["flags"] or "(as given)"))
    best, best_flags = min(fitting)
    print(f"chosen: {chosen:.0f} ms measured; fastest measured that fits: {best:.0f} ms (`{best_flags}`): "
          f"chosen / fastest {chosen / best:.2f}")
PY
