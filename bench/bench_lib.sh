# shellcheck shell=bash disable=SC2154  # tmp, base, iters, launch: set by the script that sources this
# Shared by the training benchmarks (bench/offload_bench.sh, bench/dist_offload_bench.sh): sourced,
# not run. The caller sets
#   tmp     a scratch directory (the runs' metrics and logs go there)
#   base    an array of `tidal train` flags every run gets
#   iters   the steps per run (a run's $run_iters overrides it)
# and optionally
#   launch  an array put before build/tidal (e.g. mpirun ... -np 2); empty for one process
#   round   a suffix that keeps the runs of interleaved rounds apart (table pools them)

# run NAME [flags...]: one training run of $run_iters (default $iters) steps at micro-batch $mb
# (default 1), its metrics in $tmp/NAME[.rROUND].json, its output in $tmp/NAME[.rROUND].log; the
# exit status is kept in $tmp/NAME[.rROUND].rc (an out-of-memory run is a result, not a failure).
run() {
  local name=$1${round:+.r$round}
  shift
  set +e
  ${launch[@]+"${launch[@]}"} build/tidal train "${base[@]}" --train-iters "${run_iters:-$iters}" \
    --micro-batch-size "${mb:-1}" "$@" --metrics-json "$tmp/$name.json" >"$tmp/$name.log" 2>&1
  echo $? >"$tmp/$name.rc"
  set -e
}

# table TITLE NAME... : the markdown rows of the runs (every round of each pooled: medians over the
# steps after each run's first; each run's median; the fastest step, which is what other load on a
# shared host slows the least), the first run that trained as the baseline of the ratios. With
# several ranks (summary.ranks) the peaks are every rank's, "rank 0 / rank 1 / ..."; the offload and
# gradient-reduction figures are rank 0's.
table() {
  /usr/bin/python3 - "$tmp" "$@" <<'PY'
import glob, json, os, statistics, sys
tmp, title, names = sys.argv[1], sys.argv[2], sys.argv[3:]
MiB = 2 ** 20
print(f"\n{title}\n")
print("| run | median step (ms) | ratio | tokens/s | tokens/s by run | fastest step (tokens/s) | peak activations (MiB) | device peak (MiB) | reserved peak (MiB) | offloaded / step (MiB) | copies (ms/step) | compute waited (ms/step) | overlap | grad reduce (ms/step) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
base = None
def per_rank(s, key):
    ranks = s.get("ranks") or [s]
    return " / ".join(f"{r[key] / MiB:.0f}" for r in ranks)
for name in names:
    runs = sorted(glob.glob(f"{tmp}/{name}.rc") + glob.glob(f"{tmp}/{name}.r*.rc"))
    ok, failed = [], []
    for rc_path in runs:
        rc, stem = int(open(rc_path).read()), rc_path[:-3]
        if rc == 0:
            ok.append(json.load(open(stem + ".json")))
        else:
            log = open(stem + ".log").read()
            failed.append("out of memory" if "out of memory" in log.lower() else f"failed (exit {rc})")
    if not ok:
        why = failed[0] if len(set(failed)) == 1 else "; ".join(failed)
        print(f"| {name} | {why}{f' ({len(failed)} of {len(runs)} runs)' if len(runs) > 1 else ''} | | | | | | | | | | | | |")
        continue
    label = name + (f" ({len(failed)} of {len(runs)} runs: {', '.join(failed)})" if failed else "")
    later = lambda j: j["steps"][1:] or j["steps"]
    ms = statistics.median([s["step_ms"] for j in ok for s in later(j)])
    tokens = statistics.median([s["tokens_per_s"] for j in ok for s in later(j)])
    by_run = " / ".join(f'{statistics.median([s["tokens_per_s"] for s in later(j)]):.0f}' for j in ok)
    fastest = max(s["tokens_per_s"] for j in ok for s in later(j))
    base = base or ms
    s = ok[0]["summary"]
    n = sum(len(j["steps"]) for j in ok)
    act = s["peak_bytes_by_category"]["activation"] / MiB
    offs = [j["summary"]["offload"] for j in ok if j["summary"].get("offload")]
    if offs:
        off = f'{offs[0]["offloaded_bytes_per_step"] / MiB:.0f}'
        copies = f'{sum(o["d2h_ms"] + o["h2d_ms"] for o in offs) / n:.0f}'
        waited = f'{sum(o["exposed_wait_ms"] for o in offs) / n:.0f}'
        overlap = f'{statistics.mean(o["overlap_fraction"] for o in offs):.2f}'
    else:
        off = copies = waited = overlap = "-"
    comms = [j["summary"]["comm"] for j in ok if j["summary"].get("comm")]
    reduce = f'{sum(c["grad_reduce_ms"] for c in comms) / n:.0f}' if comms else "-"
    print(f"| {label} | {ms:.0f} | {ms / base:.2f} | {tokens:.0f} | {by_run} | {fastest:.0f} | {act:.0f} | {per_rank(s, 'device_peak_bytes')} | "
          f"{per_rank(s, 'device_peak_reserved_bytes')} | {off} | {copies} | {waited} | {overlap} | {reduce} |")
PY
}
