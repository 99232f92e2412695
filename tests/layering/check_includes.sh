#!/usr/bin/env bash
# The backend seam, checked on the sources (docs/architecture.md): no file outside tidal/backend/
# includes a backend's own header (tidal/backend/<device>/...): the rest of tidal reaches a device
# through tidal/seam/. Tests of one backend's internals live under tests/<kind>/backend/<device>/.
# Prints the offending lines and exits 1 when there are any.
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"
bad=$(grep -rnE '#include "tidal/backend/' tidal tools tests bench examples \
        --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' 2>/dev/null |
      grep -vE '^(tidal/backend/|tests/[a-z]+/backend/)' || true)
if [ -n "$bad" ]; then
  echo "backend headers included outside tidal/backend/ (go through tidal/seam/ instead):"
  echo "$bad"
  exit 1
fi
echo "includes: no backend header outside tidal/backend/"
