#!/bin/sh
# PyTorch parity of the four tiny presets: tidal_parity_dump writes weights, batches and tidal's
# outputs; reference.py recomputes them with its own PyTorch code and compares (docs/parity.md).
# usage: run_parity.sh [path/to/tidal_parity_dump] [python with torch and numpy]
set -u
dump=${1:-build/tidal_parity_dump}
python=${2:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tidal_parity.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
status=0
for model in tiny-gpt2 tiny-llama tiny-qwen3 tiny-qwen3-moe; do
  if ! "$dump" "$model" "$tmp/$model"; then
    echo "parity: tidal_parity_dump failed for $model"
    status=1
    continue
  fi
  "$python" "$here/reference.py" "$tmp/$model" || status=1
done
[ "$status" -eq 0 ] && echo "parity: all models match PyTorch" || echo "parity: FAILED (see above)"
exit "$status"
