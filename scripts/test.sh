#!/usr/bin/env bash
# The test command (README, .ci/run): installs dependencies, checks the C++ style (.clang-format), builds
# in build/, runs every test (the include and layer checks among them), then
# the sanitizer builds: ASan+UBSan on the unit, streams and gradcheck tests (build-asan/), TSan on the streams
# tests (tests/streams: streams, events, offload, the swap optimizer, data-parallel streams; build-tsan/), and
# last the fuzzers: every regression input of tests/fuzz, then
# each libFuzzer target for its share of a minute (scripts/fuzz.sh, build-fuzz/). TIDAL_TEST_QUICK=1 skips
# the sanitizer builds and the fuzzers.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/check_format.sh
# Idle OpenMP threads sleep instead of spinning: on 2 shared cores spinning threads starve the
# stream workers and any other process (a gradcheck went from 4.4 s to 0.18 s under load).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
jobs=$(nproc)

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure

if [ "${TIDAL_TEST_QUICK:-0}" = "1" ]; then
  exit 0
fi

echo "== ASan + UBSan: unit, streams and gradient-check tests"
# -O1 and line tables only (CMakeLists.txt adds -g1 under a sanitizer): the builds, not the runs, are
# what takes the time here (the ASan tests run in ~11 s; -O2 -g builds took twice as long).
sanitizer_flags=(-DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS=-O1 -DTIDAL_BUILD_BENCH=OFF)
cmake -S . -B build-asan -G Ninja "${sanitizer_flags[@]}" -DTIDAL_SANITIZE=address,undefined >/dev/null
cmake --build build-asan -j "$jobs" --target tidal_unit_tests tidal_streams_tests tidal_gradcheck_tests
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
build-asan/tidal_unit_tests
build-asan/tidal_streams_tests
build-asan/tidal_gradcheck_tests

echo "== TSan: the streams tests (streams, events, offload, swap optimizer, data-parallel streams)"
cmake -S . -B build-tsan -G Ninja "${sanitizer_flags[@]}" -DTIDAL_SANITIZE=thread >/dev/null
cmake --build build-tsan -j "$jobs" --target tidal_streams_tests
TSAN_OPTIONS=halt_on_error=1 OMP_NUM_THREADS=1 TIDAL_NUM_THREADS=1 build-tsan/tidal_streams_tests

echo "== Fuzzing: regression inputs, then a minute over the parsers (docs/reliability.md, Fuzzing)"
scripts/fuzz.sh 60
