#!/usr/bin/env bash
# The GPU proof: the ONE command run on the device machine (an H200; docs/cuda.md gives the exact
# device call). Unpacks the Debian packages that scripts/gpu_bundle.sh downloaded (.gpu/debs/, carried
# with the call) into a prefix, configures and builds tidal with the CUDA backend against it, then
# runs nvidia-smi, `tidal info`, tidal_cuda_tests (gtest XML into $OUT), and the benchmarks: GPT-2 124M
# and a ~1B Qwen3-shaped model (Qwen3-1.7B's shape with 16 layers: hidden 2048, seq 4096) in bf16 with
# tokens/s and MFU against 989 TFLOP/s (the H200's dense bf16 datasheet rate), PyTorch's GPT-2
# (bench/torch_gpt2.py --device cuda) beside tidal's, activation offload's hidden fraction, and each
# run's device peak against `tidal plan --dry-run`'s. Prints one summary table at the end and writes
# $OUT/gpu_report.json and $OUT/gpu_check.log.
#
# Every step runs under `timeout`, and the whole script ends within GPU_CHECK_SECONDS (480: 8 minutes)
# — a step that would start with too little time left is recorded as skipped. A failing step does not
# stop the later ones: the report records it as failed, with its exit status.
#
# Binaries built on the build machine (scripts/gpu_bundle.sh BUILD_DIR puts tidal and tidal_cuda_tests,
# stripped and xz-compressed, in .gpu/prebuilt/) are used when they load there: the build step, the
# longest, is then skipped and its minutes go to the benchmarks; when they do not load (another
# distribution's libraries), tidal is configured and built there as before.
#
# GPU_CHECK_STEPS=bench runs the benchmarks without the tests; GPU_CHECK_STEPS=tests runs everything but
# the benchmarks (a rerun after fixes; scripts/gpu_diagnose.sh
# may follow it in the same device call). GPU_CHECK_STEPS=configure only unpacks and configures: it tests the prefix on a machine without a
# GPU (GPU_CHECK_CMAKE_ARGS adds CMake arguments there, e.g. -DCMAKE_IGNORE_PREFIX_PATH=/usr to keep
# CMake away from the system's own copies).
set -uo pipefail  # no -e: a failing step is recorded, and the next one runs
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/.gpu/out}
PREFIX=${GPU_PREFIX:-/tmp/gpuprefix}
BUILD=${GPU_BUILD:-$ROOT/build-gpu}
BIN=$BUILD  # where tidal and tidal_cuda_tests are: $BUILD, or the carried prebuilt ones
SCRATCH=${GPU_SCRATCH:-/tmp/gpucheck}
STEPS=${GPU_CHECK_STEPS:-all}
BUDGET=${GPU_CHECK_SECONDS:-480}
PEAK_TFLOPS=989
mkdir -p "$OUT" "$SCRATCH"
: >"$OUT/gpu_check.log"
START=$(date +%s)
STEPFILE=$SCRATCH/steps.tsv
: >"$STEPFILE"
USR=$PREFIX/usr
ARCH=$USR/lib/x86_64-linux-gnu
LIBS=$ARCH:$PREFIX/lib/x86_64-linux-gnu  # Debian keeps a few libraries (zlib) in /lib
for d in /opt/torch/.venv/bin /usr/local/cuda/bin; do [ -d "$d" ] && PATH=$PATH:$d; done
export PATH

# step NAME LIMIT_SECONDS COMMAND...: runs COMMAND under timeout (at most what is left of the budget,
# keeping 20 s for the summary), records NAME, its status and seconds in $STEPFILE.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - 20 - ($(date +%s) - START)))
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$limit" -lt 10 ]; then
    echo "=== $name: skipped, ${left}s left of the ${BUDGET}s budget"
    printf '%s\tskipped\t0\tout of time\n' "$name" >>"$STEPFILE"
    return 1
  fi
  echo "=== $name (timeout ${limit}s)"
  local t0 rc status
  t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@"
  rc=$?
  status=ok
  [ $rc -ne 0 ] && status=failed
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && status=timeout
  echo "=== $name: $status (exit $rc, $(($(date +%s) - t0)) s)"
  printf '%s\t%s\t%s\texit %s\n' "$name" "$status" "$(($(date +%s) - t0))" "$rc" >>"$STEPFILE"
  return $rc
}

# The unpacked packages, with absolute symbolic links re-pointed into the prefix.
unpack() {
  ls .gpu/debs/*.deb >/dev/null || { echo "no .gpu/debs/*.deb: run scripts/gpu_bundle.sh and carry .gpu"; return 1; }
  rm -rf "$PREFIX" && mkdir -p "$PREFIX" || return 1
  for f in .gpu/debs/*.deb; do dpkg -x "$f" "$PREFIX" || return 1; done
  find "$PREFIX" -type l -lname '/*' | while read -r l; do ln -sfn "$PREFIX$(readlink "$l")" "$l"; done
  echo "unpacked $(ls .gpu/debs/*.deb | wc -l) packages into $PREFIX"
}

# NCCL, cuDNN and cuBLASLt: the toolkit's, else the ones PyTorch's wheels carry (nvidia-nccl-cu13,
# nvidia-cudnn-cu13, nvidia-cublas), linked under unversioned names in $PREFIX/cuda so that CMake finds
# them. Writes the CMake arguments and the wheels' library folders to $SCRATCH/cuda_libs.
cuda_libs() {
  local cuda=/usr/local/cuda lib site entry name var args="" libdirs=""
  mkdir -p "$PREFIX/cuda/lib" "$PREFIX/cuda/include"
  site=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
  for entry in nccl:TIDAL_NCCL_LIBRARY cudnn:TIDAL_CUDNN_LIBRARY cublasLt:CUDA_cublasLt_LIBRARY; do
    name=${entry%%:*} var=${entry#*:}
    lib=$(ls $cuda/lib64/lib$name.so $cuda/targets/x86_64-linux/lib/lib$name.so 2>/dev/null | head -1)
    if [ -z "$lib" ]; then
      # shellcheck disable=SC2086  # $site: several folders
      lib=$(find $site -path "*nvidia*" -name "lib$name.so*" 2>/dev/null | sort | head -1)
      [ -n "$lib" ] || { echo "no lib$name in $cuda or in Python's nvidia wheels ($site)"; return 1; }
      ln -sfn "$lib" "$PREFIX/cuda/lib/lib$name.so"
      # its own headers only (nccl*, cudnn*, cublas*): a wheel's include folder can hold CUDA's others too
      for h in "$(dirname "$(dirname "$lib")")/include/${name%Lt}"*; do [ -e "$h" ] && ln -sfn "$h" "$PREFIX/cuda/include/"; done
      libdirs="$libdirs:$(dirname "$lib")"
      lib=$PREFIX/cuda/lib/lib$name.so
      args="$args -D$var=$lib"
    fi
    echo "$name: $lib"
  done
  printf '%s\n%s\n' "$args" "$libdirs" >"$SCRATCH/cuda_libs"
}

configure() {
  local generator=() cuda_args="" extra_inc=""
  command -v ninja >/dev/null && generator=(-G Ninja)
  [ -f "$SCRATCH/cuda_libs" ] && cuda_args=$(sed -n 1p "$SCRATCH/cuda_libs")
  [ -n "$(ls "$PREFIX/cuda/include" 2>/dev/null)" ] && extra_inc="-isystem $PREFIX/cuda/include"
  export PKG_CONFIG_LIBDIR=$ARCH/pkgconfig:$USR/share/pkgconfig PKG_CONFIG_SYSROOT_DIR=$PREFIX
  export LD_LIBRARY_PATH=$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # pkgconf's libpkgconf; the linker's -rpath-link
  # MPI without its compiler wrapper (Debian's mpicc has /usr compiled in): header folder and library.
  # shellcheck disable=SC2086
  cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DTIDAL_CUDA=ON -DTIDAL_WERROR=OFF \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DCMAKE_PREFIX_PATH="$USR" \
    -DPKG_CONFIG_EXECUTABLE="$USR/bin/pkgconf" \
    -DDNNL_INCLUDE_DIR="$USR/include" -DDNNL_LIBRARY="$ARCH/libdnnl.so" \
    -DZLIB_INCLUDE_DIR="$USR/include" -DZLIB_LIBRARY="$ARCH/libz.so" \
    -DMPI_C_COMPILER="$ROOT/.gpu/no-mpicc" -DMPI_C_HEADER_DIR="$ARCH/openmpi/include" -DMPI_C_LIB_NAMES=mpi \
    -DMPI_mpi_LIBRARY="$ARCH/openmpi/lib/libmpi.so" -DMPIEXEC_EXECUTABLE="$USR/bin/mpirun" \
    -DCMAKE_CXX_FLAGS="$extra_inc" -DCMAKE_CUDA_FLAGS="$extra_inc" $cuda_args ${GPU_CHECK_CMAKE_ARGS:-} || return 1
  echo "found (each must lie under $PREFIX):"
  grep -E '^(DNNL_|ZLIB_|MPI_C_HEADER_DIR|MPI_mpi_LIBRARY|PCRE2_LINK_LIBRARIES|PCRE2_INCLUDEDIR|GTest_DIR|nlohmann_json_DIR|benchmark_DIR|TIDAL_NCCL|TIDAL_CUDNN)' \
    "$BUILD/CMakeCache.txt"
}

# The library path for tidal's programs: the prefix, and the wheels' NCCL and cuDNN when those are used.
tidal_env() {
  local libdirs=""
  [ -f "$SCRATCH/cuda_libs" ] && libdirs=$(sed -n 2p "$SCRATCH/cuda_libs")
  echo "$LIBS$libdirs:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# The carried binaries, unpacked into $SCRATCH/prebuilt; they are used if `tidal info` runs (it exits
# 127 when a library is missing).
prebuilt() {
  ls .gpu/prebuilt/*.xz >/dev/null 2>&1 || { echo "no .gpu/prebuilt/*.xz"; return 1; }
  mkdir -p "$SCRATCH/prebuilt" || return 1
  for f in .gpu/prebuilt/*.xz; do
    xz -dc "$f" >"$SCRATCH/prebuilt/$(basename "$f" .xz)" && chmod +x "$SCRATCH/prebuilt/$(basename "$f" .xz)" || return 1
  done
  cat .gpu/prebuilt/BUILT 2>/dev/null
  LD_LIBRARY_PATH="$(tidal_env)" "$SCRATCH/prebuilt/tidal" info
}

# tidal train on the GPU, and its dry run: NAME then the train flags. Metrics into $SCRATCH/NAME.json.
bench() {
  local name=$1
  shift
  step "$name" "${LIMIT:-90}" env LD_LIBRARY_PATH="$(tidal_env)" "$BIN/tidal" train --device cuda --mock-data \
    --hidden-dropout 0 --attention-dropout 0 --eval-interval 0 --log-interval 1 --metrics-json "$SCRATCH/$name.json" "$@"
}
dry_run() {
  local name=$1
  shift
  step "$name-dry-run" 60 env LD_LIBRARY_PATH="$(tidal_env)" "$BIN/tidal" plan --dry-run --kernels cuda --mock-data \
    --hidden-dropout 0 --attention-dropout 0 --eval-interval 0 "$@" >"$SCRATCH/$name-dry-run.txt" 2>&1
  cat "$SCRATCH/$name-dry-run.txt"
}

GPT2=(--model gpt2-124m --seq-length 1024 --micro-batch-size 8 --global-batch-size 8 --train-iters 8 --bf16)
QWEN3=(--model qwen3-1.7b --num-layers 16 --seq-length 4096 --micro-batch-size 1 --global-batch-size 1
  --train-iters 6 --bf16 --attention flash)
OFFLOAD=("${GPT2[@]}" --activation-offload)
RECOMPUTE=("${GPT2[@]}" --recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
QWEN3_OFFLOAD=("${QWEN3[@]}" --activation-offload)
QWEN3_RECOMPUTE=("${QWEN3[@]}" --recompute-granularity full --recompute-method uniform --recompute-num-layers 1)

main() {
echo "gpu_check: $(date -u +%FT%TZ) on $(hostname), budget ${BUDGET}s, steps: $STEPS"
GPU=false  # the steps that need the GPU
[ "$STEPS" = all ] || [ "$STEPS" = tests ] || [ "$STEPS" = bench ] && GPU=true
$GPU && step nvidia-smi 20 nvidia-smi
step unpack 60 bash -c "$(declare -f unpack); PREFIX='$PREFIX' unpack"
step cuda-libs 30 bash -c "$(declare -f cuda_libs); PREFIX='$PREFIX' SCRATCH='$SCRATCH' cuda_libs"
if $GPU && step prebuilt 60 bash -c "$(declare -f prebuilt tidal_env); SCRATCH='$SCRATCH' LIBS='$LIBS' prebuilt"; then
  BIN=$SCRATCH/prebuilt
else
  step configure 90 bash -c "$(declare -f configure); ROOT='$ROOT' PREFIX='$PREFIX' USR='$USR' ARCH='$ARCH' LIBS='$LIBS' \
    BUILD='$BUILD' SCRATCH='$SCRATCH' GPU_CHECK_CMAKE_ARGS='${GPU_CHECK_CMAKE_ARGS:-}' configure"
  $GPU && step build 300 env LD_LIBRARY_PATH="$(tidal_env)" cmake --build "$BUILD" -j16 --target tidal tidal_cuda_tests
fi
echo "$BIN" >"$SCRATCH/bin"  # for scripts/gpu_diagnose.sh
if $GPU; then
  # The dry runs run on the meta device (CPU only): beside the GPU steps, in the background.
  (dry_run gpt2 "${GPT2[@]}"; dry_run qwen3 "${QWEN3[@]}"; dry_run offload "${OFFLOAD[@]}"; dry_run recompute "${RECOMPUTE[@]}"
    dry_run qwen3-offload "${QWEN3_OFFLOAD[@]}"; dry_run qwen3-recompute "${QWEN3_RECOMPUTE[@]}") >"$SCRATCH/dry.log" 2>&1 &
  dry_pid=$!
  step info 30 env LD_LIBRARY_PATH="$(tidal_env)" "$BIN/tidal" info
  # Every kernel's registers, shared and local memory as built (the image has cuobjdump; the build
  # machines do not, where ptxas's spill and local-memory warnings are errors instead): no local memory.
  step resources 30 bash -c "set -o pipefail; cuobjdump --dump-resource-usage '$BIN/tidal' \
    | tee '$SCRATCH/resource_usage.txt' | grep -c 'Function'; cat '$SCRATCH/resource_usage.txt'; \
    ! grep -E 'LOCAL:[1-9]' '$SCRATCH/resource_usage.txt'"
  [ "$STEPS" != bench ] && step cuda-tests 150 env LD_LIBRARY_PATH="$(tidal_env)" "$BIN/tidal_cuda_tests" \
    --gtest_output="xml:$OUT/cuda_tests.xml"
fi
if [ "$STEPS" = all ] || [ "$STEPS" = bench ]; then
  LIMIT=90 bench gpt2 "${GPT2[@]}"
  step torch-gpt2 90 bash -c "set -o pipefail; PYTHONUNBUFFERED=1 python3 bench/torch_gpt2.py --vocab 50257 --hidden 768 --layers 12 \
    --heads 12 --seq 1024 --batch 8 --steps 8 --warmup 3 --bf16 --device cuda | tee '$SCRATCH/torch_gpt2.json'"
  LIMIT=120 bench qwen3 "${QWEN3[@]}"
  LIMIT=60 bench offload "${OFFLOAD[@]}"
  LIMIT=60 bench recompute "${RECOMPUTE[@]}"
  LIMIT=90 bench qwen3-offload "${QWEN3_OFFLOAD[@]}"
  LIMIT=90 bench qwen3-recompute "${QWEN3_RECOMPUTE[@]}"
fi
if $GPU; then
  wait "$dry_pid"
  cat "$SCRATCH/dry.log"
fi

python3 - "$STEPFILE" "$OUT" "$SCRATCH" "$PEAK_TFLOPS" "$(($(date +%s) - START))" <<'EOF'
import json, os, re, sys
stepfile, out, scratch, peak, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
steps = []
for line in open(stepfile):
    name, status, secs, note = line.rstrip("\n").split("\t")
    steps.append({"step": name, "status": status, "seconds": int(secs), "note": note})

def flops_per_token(cfg, seq):
    """6 N (N: the weights that multiply, the tied head counted once) + 12 L s d_attn (PaLM's attention term)."""
    get = lambda *keys: next((cfg[k] for k in keys if cfg.get(k)), None)
    h, L, V = get("hidden_size", "n_embd"), get("num_hidden_layers", "n_layer"), cfg["vocab_size"]
    heads = get("num_attention_heads", "n_head")
    hd = cfg.get("head_dim") or h // heads
    kv = cfg.get("num_key_value_heads") or heads
    ffn = cfg.get("intermediate_size") or cfg.get("n_inner") or 4 * h
    gated = "qwen" in cfg.get("model_type", "") or "llama" in cfg.get("model_type", "")
    per_layer = h * heads * hd * 2 + 2 * h * kv * hd + (3 if gated else 2) * h * ffn
    return 6 * (L * per_layer + V * h) + 12 * L * seq * heads * hd

def dry_peak(name):
    p = os.path.join(scratch, name + "-dry-run.txt")
    m = re.search(r"device peak [^(]*\((\d+) B", open(p).read()) if os.path.exists(p) else None
    return int(m[1]) if m else None

benches = {}
for name in ("gpt2", "qwen3", "offload", "recompute", "qwen3-offload", "qwen3-recompute"):
    b = {"ran": False}
    try:
        j = json.load(open(os.path.join(scratch, name + ".json")))
        s, c = j["summary"], j["config"]
        cfg, seq = c["model"], c.get("seq_length") or 1024
        # tokens/s from the median step, as bench/torch_gpt2.py reports it (the summary's tokens_per_s is
        # the mean over every step, the first one's start-up included)
        tokens = (c.get("global_batch_size") or 0) * seq
        tps = tokens / (s["median_step_ms"] / 1e3) if tokens and s.get("median_step_ms") else s["tokens_per_s"]
        b = {"ran": True, "tokens_per_s": tps, "median_step_ms": s["median_step_ms"],
             "device_peak_bytes": s.get("device_peak_bytes"), "final_loss": s.get("final_loss")}
        b["mfu"] = b["tokens_per_s"] * flops_per_token(cfg, seq) / (peak * 1e12)
        if "offload" in s:
            b["offload_hidden_fraction"] = s["offload"].get("overlap_fraction")
    except Exception as e:  # the step failed or wrote nothing: the steps table says which
        b["error"] = repr(e)
    b["dry_run_peak_bytes"] = dry_peak(name)
    benches[name] = b
try:
    t = json.loads(open(os.path.join(scratch, "torch_gpt2.json")).read().strip().splitlines()[-1])
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257}  # as run above
    benches["torch_gpt2"] = {"ran": True, "tokens_per_s": t["tokens_per_s"], "median_step_ms": t["median_step_ms"],
                             "device_peak_bytes": t.get("peak_device_bytes"), "torch": t.get("torch"),
                             "mfu": t["tokens_per_s"] * flops_per_token(gpt2, 1024) / (peak * 1e12)}
except Exception as e:
    benches["torch_gpt2"] = {"ran": False, "error": repr(e)}

report = {"seconds": seconds, "peak_tflops": peak, "steps": steps, "benchmarks": benches,
          "passed": all(s["status"] == "ok" for s in steps if s["step"] != "prebuilt")}  # else built there
json.dump(report, open(os.path.join(out, "gpu_report.json"), "w"), indent=1)

gib = lambda b: "-" if b is None else f"{b / 2**30:.2f}"
print("\n==== gpu_check summary (%d s; %s)" % (seconds, "all steps ok" if report["passed"] else "SOME STEPS FAILED"))
print(f"{'step':<24}{'status':<10}{'s':>5}  note")
for s in steps:
    print(f"{s['step']:<24}{s['status']:<10}{s['seconds']:>5}  {s['note']}")
print(f"\n{'benchmark':<16}{'tokens/s':>11}{'ms/step':>10}{'MFU':>7}{'peak GiB':>10}{'dry GiB':>9}  other")
for name, b in benches.items():
    if not b["ran"]:
        print(f"{name:<16}{'not run':>11}")
        continue
    mfu = f"{100 * b['mfu']:.1f}%" if "mfu" in b else "-"
    other = f"offload hidden {b['offload_hidden_fraction']:.2f}" if b.get("offload_hidden_fraction") is not None else ""
    if name == "torch_gpt2":
        other = f"torch {b.get('torch')}"
    print(f"{name:<16}{b['tokens_per_s']:>11.0f}{b['median_step_ms']:>10.1f}{mfu:>7}"
          f"{gib(b.get('device_peak_bytes')):>10}{gib(b.get('dry_run_peak_bytes')):>9}  {other}")
sys.exit(0 if report["passed"] else 1)
EOF
}

main 2>&1 | tee -a "$OUT/gpu_check.log"  # exits 1 when a step failed (pipefail)
