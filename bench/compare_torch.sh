#!/usr/bin/env bash
# tidal against PyTorch, in one run (docs/performance.md, "Against PyTorch"): the same GPT-2 configs
# (4 layers/hidden 256/seq 256/batch 8/vocab 8192, and the 124M shape at seq 512/batch 4/vocab 50257;
# dropout 0, the same AdamW) trained by tidal, by PyTorch 2.x from PyPI and by Debian's PyTorch 1.13,
# alternating in fresh processes, for no recompute, selective, full and activation-function recompute,
# in fp32 and bf16 (PyTorch: torch.autocast("cpu", dtype=torch.bfloat16)). 2 threads each.
# The "moe" config: a Qwen3-MoE of bench/configs/qwen3_moe_512.json (hidden 512, 4 layers, 32 experts
# top-4, 4 x 256 tokens) trained by tidal and by transformers 5.x's Qwen3MoeForCausalLM (bench/torch_moe.py).
#
# Usage: bench/compare_torch.sh [options of bench/compare_torch.py], e.g.
#   bench/compare_torch.sh --configs small --modes none,full --rounds 3
#   bench/compare_torch.sh --configs 124m --modes none --compile   (a torch.compile side too)
# TIDAL_BENCH_TORCH1=0 leaves Debian's torch 1.13 out (without libopenblas0-openmp its 124M rows take many minutes).
# PyTorch 2.x is installed from PyPI into a virtual environment outside the repository
# ($TIDAL_BENCH_VENV, default ~/.cache/tidal-bench-venv) on the first run: a benchmark, never a test
# dependency. Debian's torch (python3-torch) runs with OpenBLAS's OpenMP build when
# libopenblas0-openmp is installed (apt-get install libopenblas0-openmp: not a tidal dependency);
# without it Debian's reference BLAS makes its fp32 rows meaningless, and the script says so.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build --target tidal tidal_bench >/dev/null

venv=${TIDAL_BENCH_VENV:-$HOME/.cache/tidal-bench-venv}
if ! "$venv/bin/python" -c "import torch, transformers" 2>/dev/null; then
  echo "installing PyTorch 2.x and transformers 5.x from PyPI into $venv (once)" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q torch numpy transformers
fi

torch1=()
openblas=/usr/lib/x86_64-linux-gnu/openblas-openmp
if [ "${TIDAL_BENCH_TORCH1:-1}" = 0 ]; then
  echo "Debian's torch 1.13 left out (TIDAL_BENCH_TORCH1=0)" >&2
elif /usr/bin/python3 -c "import torch" 2>/dev/null; then
  torch1=(--torch1 /usr/bin/python3)
  if [ -e "$openblas/libblas.so.3" ]; then
    # Debian's torch links libblas.so.3: point it at OpenBLAS (OpenMP) whatever the alternative says.
    export LD_LIBRARY_PATH="$openblas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    core=$(OPENBLAS_VERBOSE=2 /usr/bin/python3 -c "import torch; torch.ones(8, 8) @ torch.ones(8, 8)" 2>&1 |
      sed -n 's/^Core: //p')
    # OpenBLAS 0.3.21 falls back to its generic kernel on CPUs it does not know (DESIGN.md).
    if [ "$core" = "Prescott" ]; then export OPENBLAS_CORETYPE=SkylakeX; fi
    echo "Debian torch BLAS: OpenBLAS (OpenMP), core ${OPENBLAS_CORETYPE:-$core}" >&2
  else
    echo "Debian torch BLAS: the libblas.so.3 alternative ($(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3));" \
      "install libopenblas0-openmp for its best BLAS" >&2
  fi
else
  echo "Debian's python3-torch is not installed: its rows are left out" >&2
fi

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%Y-%m-%d)"
echo "tidal $(git rev-parse --short HEAD); PyTorch 2.x: $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
exec /usr/bin/python3 bench/compare_torch.py --tidal build/tidal --tidal-bench build/tidal_bench --torch2 "$venv/bin/python" ${torch1[@]+"${torch1[@]}"} "$@"
