#!/usr/bin/env bash
# The main job on its built-in default: installs dependencies, builds, and runs `tidal demo`
# (a tiny transformer trained on generated text; needs nothing from outside the repository).
# Extra arguments go to `tidal demo` (see `build/tidal help`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target tidal
exec build/tidal demo "$@"
