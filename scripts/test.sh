#!/usr/bin/env bash
# The test command (README, .ci/run): installs dependencies, checks the C++ style (.clang-format), builds
# in build/, runs every test (the include and layer checks among them), then
# the sanitizer builds: ASan+UBSan on the unit, streams and gradcheck tests (clang, in build-fuzz/: the
# fuzzers' build, so the library is compiled under ASan once), TSan on the streams tests (tests/streams:
# streams, events, offload, the swap optimizer, data-parallel streams; build-tsan/), and last the fuzzers:
# every regression input of tests/fuzz, then each libFuzzer target for its share of a minute
# (scripts/fuzz.sh). TIDAL_TEST_QUICK=1 skips the sanitizer builds and the fuzzers.
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
ctest --test-dir build --output-on-failure -j "$jobs"  # the tests take ~285 s one after another

if [ "${TIDAL_TEST_QUICK:-0}" = "1" ]; then
  exit 0
fi

echo "== ASan + UBSan: unit, streams and gradient-check tests (clang, build-fuzz/: the fuzzers' build)"
# One ASan+UBSan build of the library serves these tests and the fuzz targets below (a second one, with
# GCC, took ~1700 CPU-s of CI's time). That build compiles without OpenMP (CMakeLists.txt, TIDAL_FUZZ), so
# the tests' loops run on one thread here; the streams' threads are TSan's below.
scripts/fuzz.sh --configure
cmake --build build-fuzz -j "$jobs" --target tidal_unit_tests tidal_streams_tests tidal_gradcheck_tests
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
build-fuzz/tidal_unit_tests
build-fuzz/tidal_streams_tests
build-fuzz/tidal_gradcheck_tests

echo "== TSan: the streams tests (streams, events, offload, swap optimizer, data-parallel streams)"
# -O1 and line tables only (CMakeLists.txt adds -g1 under a sanitizer): the build, not the run, is what
# takes the time here.
sanitizer_flags=(-DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS=-O1 -DTIDAL_BUILD_BENCH=OFF)
cmake -S . -B build-tsan -G Ninja "${sanitizer_flags[@]}" -DTIDAL_SANITIZE=thread >/dev/null
cmake --build build-tsan -j "$jobs" --target tidal_streams_tests
TSAN_OPTIONS=halt_on_error=1 OMP_NUM_THREADS=1 TIDAL_NUM_THREADS=1 build-tsan/tidal_streams_tests

echo "== Fuzzing: regression inputs, then a minute over the parsers (docs/reliability.md, Fuzzing)"
scripts/fuzz.sh 60
