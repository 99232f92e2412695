#!/usr/bin/env bash
# Hugging Face interop check (issue 11; not run by .ci/run, not a test dependency): trains tiny
# checkpoints with build/tidal (tiny-gpt2, tiny-llama, tiny-qwen3, tiny-qwen3-moe, tiny-mistral, tiny-qwen2, tiny-gemma3,
# tiny-deepseek-v3, and --pretrained from
# each family's directory of the golden table, tests/fixtures/hf/*/golden.safetensors; f32 and --bf16;
# --mock-data, a few steps, --save), loads each checkpoint's model.safetensors + config.json with
# transformers' AutoModelForCausalLM and compares its logits on a fixed token batch with tidal's
# (build/tidal_parity_dump --logits). Prints a table; exits non-zero if any case fails.
# docs/interop.md has the tolerances and the last run's table.
#
# usage: scripts/hf_interop.sh [--setup-only | --only NAME]  (NAME: part of a preset's or directory's name)
#   TIDAL_VENV   virtual environment with torch, transformers, safetensors (default
#                ~/.cache/tidal-venv; created on first use, outside the repository)
#   PYTHON       the Python that creates it (default python3)
#   TIDAL_BUILD  build directory with tidal and tidal_parity_dump (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${TIDAL_VENV:-$HOME/.cache/tidal-venv}
build=${TIDAL_BUILD:-build}

# The venv: torch's CPU-only wheel when download.pytorch.org answers, else torch from PyPI.
if ! "$venv/bin/python" -c "import torch, transformers, safetensors, numpy" 2>/dev/null; then
  echo "hf_interop: creating $venv (torch, transformers, safetensors, numpy)"
  "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  if ! "$venv/bin/pip" install -q --retries 0 --timeout 20 torch --index-url https://download.pytorch.org/whl/cpu; then
    echo "hf_interop: the CPU-only wheel index is not reachable; installing torch from PyPI"
    "$venv/bin/pip" install -q torch
  fi
  "$venv/bin/pip" install -q transformers safetensors numpy
fi
[ "${1:-}" = "--setup-only" ] && exit 0

for tool in tidal tidal_parity_dump; do
  [ -x "$build/$tool" ] || { echo "hf_interop: $build/$tool is missing: build it first (cmake --build $build)"; exit 2; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tidal_interop.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
exec "$venv/bin/python" scripts/hf_interop.py --build "$build" --work "$tmp" "$@"
