#!/usr/bin/env bash
# Checks (or with --fix, applies) the C++ style of .clang-format on every tracked source file.
# Run by scripts/test.sh, so by .ci/run. tidal/data/nfc_tables.h is generated data and left as is.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format is missing (scripts/setup.sh installs it)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' | grep -v '^tidal/data/nfc_tables.h$')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  echo "check_format: formatted ${#files[@]} files"
  exit 0
fi
if ! clang-format --dry-run --Werror "${files[@]}" 2>/tmp/tidal-format.$$; then
  grep -oE '^[^ :]+:[0-9]+' /tmp/tidal-format.$$ | cut -d: -f1 | sort -u | head -20
  rm -f /tmp/tidal-format.$$
  echo "check_format: the files above differ from .clang-format; run scripts/check_format.sh --fix" >&2
  exit 1
fi
rm -f /tmp/tidal-format.$$
echo "check_format: ${#files[@]} files follow .clang-format"
