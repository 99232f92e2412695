#!/usr/bin/env bash
# The main job on its built-in default: installs dependencies, builds, and runs `tidal train`
# (small-gpt2 on the text of Debian's fortunes package, which setup.sh installs; about 2 minutes).
# Extra arguments go to `tidal train` (see `build/tidal train --help` and docs/training.md).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target tidal
exec build/tidal train "$@"
