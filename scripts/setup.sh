#!/usr/bin/env bash
# Installs what tidal needs from Debian packages. Idempotent: does nothing when all are present.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config
  libdnnl-dev            # oneDNN: single-precision GEMM (docs/performance.md)
  nlohmann-json3-dev     # config.json, tokenizer.json, metrics
  libpcre2-dev           # the tokenizers' Unicode pre-tokenization regexes
  zlib1g-dev             # CRC-32 of checkpoint files
  libmimalloc-dev        # the tidal command's malloc (tidal plan's dry runs: CMakeLists.txt)
  openmpi-bin libopenmpi-dev   # distributed training over MPI (docs/distributed.md)
  fortunes               # the built-in training corpus of the main job
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch python3-numpy   # PyTorch parity tests (system /usr/bin/python3)
  chromium               # the profiler's plots are checked in a real browser (headless)
  clang-format           # the C++ style (.clang-format), checked by scripts/check_format.sh
  python3                # the layer check (tests/layering/check_layers.py)
  clang-16 libclang-rt-16-dev libomp-16-dev  # scripts/fuzz.sh: clang (16: the sources capture structured
                         # bindings in lambdas), libFuzzer and the sanitizers (libclang-rt), clang's OpenMP
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
