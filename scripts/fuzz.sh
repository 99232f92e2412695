#!/usr/bin/env bash
# Fuzzes tidal's parsers (docs/reliability.md, Fuzzing): builds the libFuzzer targets of tests/fuzz with clang under
# ASan+UBSan in build-fuzz/, replays every regression input (tests/fuzz/regressions/<target>/), then runs
# each target for its share of SECONDS (default 60, split evenly; 0: the replay only).
#   scripts/fuzz.sh [SECONDS]              TIDAL_FUZZ_TARGETS="config flags" limits the targets
#   scripts/fuzz.sh --configure            configures build-fuzz/ only: scripts/test.sh builds the unit, streams
#                                          and gradcheck tests there too (one clang ASan+UBSan build of the library)
# (TIDAL_FUZZ_CXX: the compiler, default clang++-16, which scripts/setup.sh installs)
# The corpus a run grows is kept in build-fuzz/corpus/<target>/ (the next run starts from it and the
# seeds of tests/fuzz/corpus/<target>/); a crashing input is written to build-fuzz/findings/<target>/.
# Exits 1 when a regression input or the fuzzing failed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
seconds=${1:-60}
configure_only=0
[ "$seconds" = "--configure" ] && configure_only=1 seconds=0
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "usage: scripts/fuzz.sh [SECONDS]" >&2; exit 2; }

targets=(${TIDAL_FUZZ_TARGETS:-safetensors config tokenizer indexed_dataset checkpoint flags jsonl instruction peft_adapter template_file device_profile profile_summary pretrained_index})
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# -O1 and line tables: what libFuzzer's documentation suggests, and half the compile time of -O2 -g.
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER="${TIDAL_FUZZ_CXX:-clang++-16}" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O1 \
  -DTIDAL_FUZZ=ON -DTIDAL_BUILD_BENCH=OFF "${launcher[@]}" >/dev/null
[ "$configure_only" = 1 ] && exit 0
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]/#/tidal_fuzz_}"

# The targets run in a scratch directory removed at the end: their files (inputs written for APIs that read
# files) go there, and so would anything a fuzzed flag names by a relative path. Paths below are absolute.
scratch=$(mktemp -d "$( [ -d /dev/shm ] && echo /dev/shm || echo /tmp )/tidal-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export TMPDIR=$scratch OMP_NUM_THREADS=1 TIDAL_NUM_THREADS=1 OMP_WAIT_POLICY=passive
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Stacks with function names and lines: the compiler's LLVM symbolizer, else any (clang's package brings one).
symbolizer=$(dirname "$(readlink -f "$(command -v "${TIDAL_FUZZ_CXX:-clang++-16}")")")/llvm-symbolizer
[ -x "$symbolizer" ] || symbolizer=$(command -v llvm-symbolizer || true)
[ -n "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH=$symbolizer
# A finding: any crash or sanitizer report, an exception other than tidal::Error, a leak, more than
# 2 GB of memory, more than 10 s on one input.
limits=(-rss_limit_mb=2048 -timeout=10)
failed=()

echo "== fuzz: regression inputs (tests/fuzz/regressions/)"
for t in "${targets[@]}"; do
  dir=tests/fuzz/regressions/$t
  [ -d "$dir" ] || continue
  n=0 bad=0
  for input in "$dir"/*; do
    [ -f "$input" ] || continue
    n=$((n + 1))
    if ! (cd "$scratch" && "$root/build-fuzz/tidal_fuzz_$t" "${limits[@]}" "$root/$input") >"$scratch/replay.log" 2>&1
    then
      bad=$((bad + 1))
      failed+=("regression $input")
      echo "FAILED: $input"
      grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|InternalError|terminate called' \
        "$scratch/replay.log" || tail -3 "$scratch/replay.log"
    fi
  done
  echo "$t: $n inputs, $bad failed"
done

if [ "$seconds" -gt 0 ]; then
  per=$((seconds / ${#targets[@]}))
  [ "$per" -ge 1 ] || per=1
  echo "== fuzz: ${per} s per target"
  for t in "${targets[@]}"; do
    corpus=$root/build-fuzz/corpus/$t findings=$root/build-fuzz/findings/$t
    mkdir -p "$corpus" "$findings"
    case $t in  # libFuzzer dictionaries: JSON keys and values of tidal's formats, the flag names
      flags) dict=(-dict="$root/tests/fuzz/flags.dict") ;;
      indexed_dataset) dict=() ;;  # (jsonl: JSON, so json.dict below)
      *) dict=(-dict="$root/tests/fuzz/json.dict") ;;
    esac
    log=$findings.log
    if (cd "$scratch" && "$root/build-fuzz/tidal_fuzz_$t" "${limits[@]}" -max_total_time="$per" -print_final_stats=1 \
      "${dict[@]}" -artifact_prefix="$findings/" "$corpus" "$root/tests/fuzz/corpus/$t") >"$log" 2>&1; then
      echo "$t: $(grep -m1 -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$') runs," \
        "$(grep -m1 -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$')/s, nothing found"
    else
      failed+=("fuzzing $t")
      echo "FAILED: $t found a crash (log: $log); the input:"
      grep -E '^(artifact_prefix|Test unit written)' "$log" || tail -20 "$log"
      grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|InternalError|terminate called' "$log" || true
    fi
  done
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} failure(s): ${failed[*]}" >&2
  echo "fuzz: a new crash becomes a regression test: copy its input to tests/fuzz/regressions/<target>/ (docs/reliability.md, Fuzzing)" >&2
  exit 1
fi
echo "fuzz: no findings"
