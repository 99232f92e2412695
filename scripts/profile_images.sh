#!/usr/bin/env bash
# Regenerates the pictures of docs/profiling.md from tidal's own output: profiles of the main job
# (plain, with full recompute, and with activation offload), each SVG screenshotted by
# headless Chromium into docs/images/. Needs a build in build/ and Debian's chromium (setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run=(build/tidal train --train-iters 3 --no-progress --sample-tokens 0 --eval-interval 0)
"${run[@]}" --profile "$tmp/main" >/dev/null
"${run[@]}" --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 \
  --profile "$tmp/recompute" >/dev/null
"${run[@]}" --activation-offload --profile "$tmp/lanes" >/dev/null

shot() {  # SVG, PNG name
  local height
  height=$(grep -o 'height="[0-9]*"' "$1" | head -1 | grep -o '[0-9]*')
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --hide-scrollbars --user-data-dir="$tmp/chromium" \
    --window-size=1000,"$height" --screenshot="docs/images/$2" "file://$(realpath "$1")" >/dev/null 2>&1
  echo "docs/images/$2"
}
shot "$tmp/main/memory.svg" profile_memory.png
shot "$tmp/main/timeline.svg" profile_timeline.png
shot "$tmp/recompute/memory.svg" profile_recompute_memory.png
shot "$tmp/recompute/timeline.svg" profile_recompute_timeline.png
shot "$tmp/lanes/memory.svg" profile_offload_memory.png
shot "$tmp/lanes/timeline.svg" profile_copy_lanes.png

# The numbers docs/profiling.md quotes next to the pictures.
build/tidal report "$tmp/main"
build/tidal report "$tmp/recompute" | head -3
build/tidal report "$tmp/lanes"
