#!/usr/bin/env bash
# bf16 learning check (issue 11; not run by .ci/run): the README's main job (`tidal train` on its
# built-in default: small-gpt2 on Debian's fortunes, 8 x 256 tokens a step) for 300 steps in f32 and
# in --bf16 from the same seed, one run after the other. Passes when the final validation losses
# (--metrics-json summary.final_val_loss) are within 1% of each other; prints both, with the median
# step times. docs/training.md, "Mixed precision", records a run.
# usage: scripts/bf16_learning_check.sh [extra tidal train flags]
#   (TIDAL_BUILD: build directory, default build; TIDAL_CHECK_STEPS: steps, default 300)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TIDAL_BUILD:-build}
steps=${TIDAL_CHECK_STEPS:-300}
[ -x "$build/tidal" ] || { echo "bf16_learning_check: $build/tidal is missing: build it first"; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tidal_bf16_check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for mode in f32 bf16; do
  flags=()
  [ "$mode" = bf16 ] && flags=(--bf16)
  echo "== $mode: $build/tidal train --train-iters $steps --seed 1234 ${flags[*]} $*"
  "$build/tidal" train --train-iters "$steps" --seed 1234 --metrics-json "$tmp/$mode.json" "${flags[@]}" "$@" \
    >"$tmp/$mode.log" 2>&1 || { tail -20 "$tmp/$mode.log"; exit 1; }
  grep "validation loss at iteration" "$tmp/$mode.log" | tail -1 || true
done
python3 - "$tmp/f32.json" "$tmp/bf16.json" <<'PY'
import json, sys
f32, bf16 = (json.load(open(p))["summary"] for p in sys.argv[1:3])
a, b = f32["final_val_loss"], bf16["final_val_loss"]
rel = abs(b - a) / abs(a)
print(f"f32:  final val loss {a:.4f}, final train loss {f32['final_loss']:.4f}, median step {f32['median_step_ms']:.1f} ms")
print(f"bf16: final val loss {b:.4f}, final train loss {bf16['final_loss']:.4f}, median step {bf16['median_step_ms']:.1f} ms")
print(f"relative difference of the validation losses: {rel:.4%} (limit 1%): {'PASS' if rel <= 0.01 else 'FAIL'}")
sys.exit(0 if rel <= 0.01 else 1)
PY
