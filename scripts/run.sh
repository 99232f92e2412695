#!/usr/bin/env bash
# The main job on its built-in default: installs dependencies, builds, and runs `tidal train`
# (small-gpt2 on the text of Debian's fortunes package, which setup.sh installs: 600 steps of 8 x 256
# tokens; on a fresh 2-core machine about 3 minutes of build, then 2 minutes of training on idle cores,
# longer on busy ones: README.md, "Quick start").
# Extra arguments go to `tidal train` (see `build/tidal train --help` and docs/training.md).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target tidal
exec build/tidal train "$@"
