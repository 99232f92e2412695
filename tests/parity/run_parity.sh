#!/bin/sh
# PyTorch parity of the four tiny presets, plus variants that reach the config paths the presets do
# not (attention biases, tied Llama, exact GELU, MoE without renormalization, every-other-layer
# experts with top-3): tidal_parity_dump writes weights, batches and tidal's outputs; reference.py
# recomputes them with its own PyTorch code and compares (docs/parity.md).
# usage: run_parity.sh [path/to/tidal_parity_dump] [python with torch and numpy]
set -u
dump=${1:-build/tidal_parity_dump}
python=${2:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tidal_parity.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
status=0
n=0
# One case per line: directory name, preset, config.json overrides.
while read -r name model overrides; do
  n=$((n + 1))
  # shellcheck disable=SC2086  # the overrides are separate words
  if ! "$dump" "$model" "$tmp/$name" $overrides >/dev/null; then
    echo "parity: tidal_parity_dump failed for $name ($model $overrides)"
    status=1
    continue
  fi
  echo "== $name${overrides:+ ($overrides)}"
  "$python" "$here/reference.py" "$tmp/$name" || status=1
done <<'CASES'
tiny-gpt2 tiny-gpt2
tiny-llama tiny-llama
tiny-qwen3 tiny-qwen3
tiny-qwen3-moe tiny-qwen3-moe
gpt2-gelu tiny-gpt2 activation_function="gelu"
llama-bias-tied tiny-llama attention_bias=true tie_word_embeddings=true
moe-all-sparse tiny-qwen3-moe norm_topk_prob=false mlp_only_layers=[]
moe-step2-top3 tiny-qwen3-moe num_hidden_layers=4 decoder_sparse_step=2 mlp_only_layers=[] num_experts_per_tok=3
CASES
if [ "$status" -eq 0 ]; then
  echo "parity: all $n cases match PyTorch"
else
  echo "parity: FAILED (see above)"
fi
exit "$status"
