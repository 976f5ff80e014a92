#!/usr/bin/env bash
# probe_workload.sh — measure how Go runtime settings change the demo's tail
# latency inside a CPU-limited cgroup, with a CPU hog beside it.
#
# What it does (needs root and a writable cgroup v1 cpu controller):
#   * builds autotune/workloads/{demo,loadgen} (stdlib only, no network);
#   * creates /sys/fs/cgroup/cpu/$CG_NAME with a quota of $CPUS CPUs (and a
#     matching cpuacct group for CPU accounting);
#   * per point: starts stress-ng (optional) and the demo INSIDE the cgroup,
#     waits for /healthz, runs the open-loop loadgen OUTSIDE the cgroup at
#     $RATE req/s against 127.0.0.1, warms up $WARMUP s, then scrapes the
#     loadgen histogram before/after a $WINDOW s window and computes
#     p50/p90/p99/p99.9 from the bucket deltas (histogram_quantile style,
#     linear interpolation inside a bucket);
#   * records host noise: CPU used on the host by processes that are not
#     ours during the window ("foreign" cores = host busy - cgroup - loadgen);
#   * kills every process it started, by PID, and removes the cgroup.
#
# Usage:  sudo benchmarks/probe_workload.sh [POINT ...]
#   POINT = "label|stress|ENV=V ENV2=V2"   stress = 1 (stress-ng in cgroup) or 0
#   Without POINTs a default matrix is used (see DEFAULT_POINTS below).
# Knobs (environment): RATE=300 WARMUP=5 WINDOW=15 REPEATS=2 CPUS=1
#   STRESS_WORKERS=2 STRESS_LOAD=25 STRESS_SLICE=10 CONNECTIONS=64
#   DEMO_LIVE_HEAP_MB / DEMO_WORK_US / DEMO_ALLOC_KB (passed to the demo when set)
#   OUT=/tmp/atprobe.<pid>  CG_NAME=atprobe  PORT_DEMO=18431  PORT_LG=18432
#   NOISE_MAX=0.25 (foreign cores above which a row is flagged NOISY)
#   QUIET_WAIT=300 (max s to wait, before each run, for the host to be quiet)
#   RETRIES=2      (extra runs of a point whose window was NOISY)
# Output: a table on stdout and $OUT/results.tsv (one row per run).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GO=${GO:-/work/venv/bin/go}
RATE=${RATE:-300}
WARMUP=${WARMUP:-5}
WINDOW=${WINDOW:-15}
REPEATS=${REPEATS:-2}
CPUS=${CPUS:-1}
STRESS_WORKERS=${STRESS_WORKERS:-2}
STRESS_LOAD=${STRESS_LOAD:-25}
STRESS_SLICE=${STRESS_SLICE:-10}
CONNECTIONS=${CONNECTIONS:-64}
CG_NAME=${CG_NAME:-atprobe}
PORT_DEMO=${PORT_DEMO:-18431}
PORT_LG=${PORT_LG:-18432}
NOISE_MAX=${NOISE_MAX:-0.25}
QUIET_WAIT=${QUIET_WAIT:-300}
RETRIES=${RETRIES:-2}
OUT=${OUT:-/tmp/atprobe.$$}
CG=/sys/fs/cgroup/cpu/$CG_NAME
CGA=/sys/fs/cgroup/cpuacct/$CG_NAME
NCPU=$(nproc)

DEFAULT_POINTS=(
  "nostress|0|"
  "default|1|"
  "gmp1|1|GOMAXPROCS=1"
  "gmp2|1|GOMAXPROCS=2"
  "gmp4|1|GOMAXPROCS=4"
  "gmp8|1|GOMAXPROCS=8"
  "fgc100|1|FORCEGC_INTERVAL_MS=100"
  "fgc500|1|FORCEGC_INTERVAL_MS=500"
  "gogc200|1|GOGC=200"
  "gogc400|1|GOGC=400"
)
if [ $# -gt 0 ]; then POINTS=("$@"); else POINTS=("${DEFAULT_POINTS[@]}"); fi

mkdir -p "$OUT"
PIDS=()      # every process we started (demo, loadgen, stress-ng)

log() { printf '[probe %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

stop_pid() { # stop_pid PID: TERM, wait up to 3 s, then KILL; only our own PIDs
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null || true
}

stop_all() {
  local pid
  for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
  PIDS=()
  # stress-ng workers are children of a PID we started; anything still in our
  # own cgroup was started by us, so end it by PID.
  if [ -f "$CG/cgroup.procs" ]; then
    for pid in $(cat "$CG/cgroup.procs"); do kill -KILL "$pid" 2>/dev/null || true; done
    for _ in $(seq 50); do [ -s "$CG/cgroup.procs" ] || break; sleep 0.1; done
  fi
}

cleanup() {
  set +e
  stop_all
  [ -d "$CG" ] && rmdir "$CG" 2>/dev/null
  [ -d "$CGA" ] && rmdir "$CGA" 2>/dev/null
  [ -d "$CG" ] && log "WARNING: could not remove $CG"
}
trap 'rc=$?; [ "$rc" = 0 ] || log "exiting with status $rc"; cleanup' EXIT
trap 'log "got SIGINT"; exit 130' INT
trap 'log "got SIGTERM"; exit 143' TERM

# ---------------------------------------------------------------- build
BIN=$OUT/bin
mkdir -p "$BIN"
for prog in demo loadgen; do
  (cd "$ROOT/autotune/workloads/$prog" &&
   GOTOOLCHAIN=local GOPROXY=off CGO_ENABLED=0 GOFLAGS=-mod=mod \
     "$GO" build -trimpath -o "$BIN/$prog" .)
done
command -v stress-ng >/dev/null || { log "stress-ng not found (apt-get install stress-ng)"; exit 1; }

# ---------------------------------------------------------------- cgroup
[ -d "$CG" ] && { log "$CG already exists; another probe running? (CG_NAME=...)"; exit 1; }
mkdir "$CG"
mkdir -p "$CGA"
echo 100000 > "$CG/cpu.cfs_period_us"
QUOTA=$(python3 -c "print(int(round($CPUS * 100000)))")
echo "$QUOTA" > "$CG/cpu.cfs_quota_us"
log "cgroup $CG quota=$(cat "$CG/cpu.cfs_quota_us")/$(cat "$CG/cpu.cfs_period_us") out=$OUT"

# start_in_cgroup LOG CMD...: runs CMD inside the cgroup (the shell joins the
# cgroup, then execs CMD, so the PID is CMD's); records the PID in PIDS.
start_in_cgroup() {
  local logf=$1; shift
  sh -c 'echo $$ > "$0/cgroup.procs" && echo $$ > "$1/cgroup.procs" && shift && exec "$@"' \
     "$CG" "$CGA" "$@" >"$logf" 2>&1 &
  PIDS+=("$!")
}

# busy_cores SECONDS: host-wide busy cores over an interval.
busy_cores() {
  local b0 t0 b1 t1
  read -r b0 t0 < <(host_stat); sleep "$1"; read -r b1 t1 < <(host_stat)
  python3 -c "print(f'{($b1-$b0)/max($t1-$t0,1)*$NCPU:.2f}')"
}

# wait_quiet: before a run (none of our processes alive), wait until other
# users of the host leave it nearly idle; sets PRE_BUSY to the last reading.
# (Not run in a command substitution, so that signals are handled promptly.)
PRE_BUSY=0
wait_quiet() {
  local waited=0
  while :; do
    PRE_BUSY=$(busy_cores 2) || true
    PRE_BUSY=${PRE_BUSY:-9}   # no reading: treat as busy
    if python3 -c "import sys; sys.exit(0 if $PRE_BUSY <= $NOISE_MAX else 1)"; then break; fi
    if [ "$waited" -ge "$QUIET_WAIT" ]; then log "host still busy ($PRE_BUSY cores), going on"; break; fi
    if [ "$waited" = 0 ]; then log "host busy ($PRE_BUSY cores not ours); waiting up to ${QUIET_WAIT}s"; fi
    sleep 5; waited=$((waited + 7))
  done
}

host_stat() { awk '/^cpu /{b=$2+$3+$4+$7+$8+$9; print b, b+$5+$6; exit}' /proc/stat; } # busy total (jiffies)

scrape() { curl -sf --max-time 3 "$1" -o "$2"; }

# ---------------------------------------------------------------- analysis
cat > "$OUT/analyze.py" <<'PY'
import math, sys

def parse(path):
    m = {}
    for line in open(path):
        if not line.strip() or line.startswith('#'):
            continue
        name_labels, val = line.rsplit(' ', 1)
        m[name_labels] = float(val)
    return m

def buckets(m, name):
    out = []
    for k, v in m.items():
        if k.startswith(name + '_bucket{le="'):
            le = k[len(name + '_bucket{le="'):-2]
            out.append((math.inf if le == '+Inf' else float(le), v))
    return sorted(out)

def quantile(q, before, after, name):
    b0, b1 = dict(buckets(before, name)), buckets(after, name)
    d = [(le, c - b0.get(le, 0.0)) for le, c in b1]  # cumulative deltas
    if not d or d[-1][1] <= 0:
        return float('nan')
    rank = q * d[-1][1]
    prev_le, prev_c = 0.0, 0.0
    for le, c in d:
        if c >= rank:
            if math.isinf(le):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_c) / max(c - prev_c, 1e-12)
        prev_le, prev_c = le, c
    return float('nan')

def delta(before, after, key):
    return after.get(key, 0.0) - before.get(key, 0.0)

(lg0, lg1, dm0, dm1, window, hostbusy, hosttotal, ncpu, cg_ns, thr_n, periods_n,
 pre_foreign, label, rep, env) = sys.argv[1:16]
window = float(window); ncpu = int(ncpu)
lg0, lg1, dm0, dm1 = parse(lg0), parse(lg1), parse(dm0), parse(dm1)
L = 'loadgen_request_duration_seconds'
ok = delta(lg0, lg1, 'loadgen_requests_total{outcome="ok"}')
err = delta(lg0, lg1, 'loadgen_requests_total{outcome="error"}')
drop = delta(lg0, lg1, 'loadgen_requests_total{outcome="dropped"}')
host_cores = float(hostbusy) / max(float(hosttotal), 1) * ncpu
cg_cores = float(cg_ns) / 1e9 / window
lg_cores = delta(lg0, lg1, 'process_cpu_seconds_total') / window
demo_cores = delta(dm0, dm1, 'process_cpu_seconds_total') / window
foreign = host_cores - cg_cores - lg_cores
gc_cores = delta(dm0, dm1, 'go_cpu_classes_gc_total_cpu_seconds_total') / window
row = dict(
    label=label, rep=rep, env=env or '-',
    p50_ms=1e3 * quantile(0.50, lg0, lg1, L),
    p90_ms=1e3 * quantile(0.90, lg0, lg1, L),
    p99_ms=1e3 * quantile(0.99, lg0, lg1, L),
    p999_ms=1e3 * quantile(0.999, lg0, lg1, L),
    srv_p99_ms=1e3 * quantile(0.99, dm0, dm1, 'http_request_duration_seconds'),
    schedlat_p99_ms=1e3 * quantile(0.99, dm0, dm1, 'go_sched_latencies_seconds'),
    rps=(ok + err) / window, errors=int(err), dropped=int(drop),
    gmp=int(dm1.get('go_sched_gomaxprocs_threads', 0)),
    gc_per_s=delta(dm0, dm1, 'go_gc_cycles_total_gc_cycles_total') / window,
    demo_cpu=demo_cores, gc_cpu=gc_cores, cgroup_cpu=cg_cores,
    throttled=f"{int(float(thr_n))}/{int(float(periods_n))}",
    lg_cpu=lg_cores, foreign=foreign, pre_foreign=float(pre_foreign),
)
print('\t'.join(f'{v:.3f}' if isinstance(v, float) else str(v) for v in row.values()))
PY
HEADER="label	rep	env	p50_ms	p90_ms	p99_ms	p999_ms	srv_p99_ms	schedlat_p99_ms	rps	errors	dropped	gmp	gc_per_s	demo_cpu	gc_cpu	cgroup_cpu	throttled	lg_cpu	foreign	pre_foreign	noisy"
[ -f "$OUT/results.tsv" ] || echo "$HEADER" > "$OUT/results.tsv"

# ---------------------------------------------------------------- one point
run_point() { # run_point LABEL STRESS ENVSTRING REP
  local label=$1 stress=$2 envs=$3 rep=$4 d
  d=$(mktemp -d "$OUT/run.$1.$4.XXX")
  # Host noise before we start anything: foreign busy cores over 1 s.
  local pre
  wait_quiet
  pre=$PRE_BUSY

  if [ "$stress" = 1 ]; then
    start_in_cgroup "$d/stress.log" stress-ng --cpu "$STRESS_WORKERS" \
      --cpu-load "$STRESS_LOAD" --cpu-load-slice "$STRESS_SLICE" --cpu-method sqrt \
      --timeout "$((WARMUP + WINDOW + 40))s" --quiet
  fi
  # shellcheck disable=SC2086  # envs is a word list of VAR=VALUE
  # timeout(1) is a dead-man switch should this script be killed hard.
  start_in_cgroup "$d/demo.log" timeout -k 5 "$((WARMUP + WINDOW + 60))" env -u GOMAXPROCS -u GOGC -u GOMEMLIMIT \
      -u FORCEGC_INTERVAL_MS -u GODEBUG $envs "$BIN/demo" -addr "127.0.0.1:$PORT_DEMO"
  local i
  for i in $(seq 300); do
    curl -sf --max-time 1 -o /dev/null "http://127.0.0.1:$PORT_DEMO/healthz" && break
    sleep 0.1
  done
  curl -sf --max-time 1 -o /dev/null "http://127.0.0.1:$PORT_DEMO/healthz" ||
    { log "demo did not become healthy; see $d/demo.log"; stop_all; return 1; }
  "$BIN/loadgen" -target "http://127.0.0.1:$PORT_DEMO/" -rate "$RATE" \
      -listen "127.0.0.1:$PORT_LG" -connections "$CONNECTIONS" \
      -max-duration "$((WARMUP + WINDOW + 30))s" >"$d/loadgen.log" 2>&1 &
  PIDS+=("$!")
  sleep "$WARMUP"

  local thr0 per0 cg0 hb0 ht0 thr1 per1 cg1 hb1 ht1
  scrape "http://127.0.0.1:$PORT_LG/metrics" "$d/lg0.txt"
  scrape "http://127.0.0.1:$PORT_DEMO/metrics" "$d/dm0.txt"
  read -r hb0 ht0 < <(host_stat)
  cg0=$(cat "$CGA/cpuacct.usage")
  thr0=$(awk '/^nr_throttled/{print $2}' "$CG/cpu.stat"); per0=$(awk '/^nr_periods/{print $2}' "$CG/cpu.stat")
  sleep "$WINDOW"
  scrape "http://127.0.0.1:$PORT_LG/metrics" "$d/lg1.txt"
  scrape "http://127.0.0.1:$PORT_DEMO/metrics" "$d/dm1.txt"
  read -r hb1 ht1 < <(host_stat)
  cg1=$(cat "$CGA/cpuacct.usage")
  thr1=$(awk '/^nr_throttled/{print $2}' "$CG/cpu.stat"); per1=$(awk '/^nr_periods/{print $2}' "$CG/cpu.stat")
  stop_all

  local row
  row=$(python3 "$OUT/analyze.py" "$d/lg0.txt" "$d/lg1.txt" "$d/dm0.txt" "$d/dm1.txt" \
        "$WINDOW" "$((hb1 - hb0))" "$((ht1 - ht0))" "$NCPU" "$((cg1 - cg0))" \
        "$((thr1 - thr0))" "$((per1 - per0))" "$pre" "$label" "$rep" "${envs:-}")
  local foreign noisy=""
  foreign=$(printf '%s\n' "$row" | awk -F'\t' '{print $20}')
  if python3 -c "import sys; sys.exit(0 if max($foreign, $pre) > $NOISE_MAX else 1)"; then noisy=NOISY; fi
  printf '%s\t%s\n' "$row" "$noisy" | tee -a "$OUT/results.tsv"
  [ -z "$noisy" ]
}

log "rate=$RATE/s warmup=${WARMUP}s window=${WINDOW}s repeats=$REPEATS cpus=$CPUS stress=${STRESS_WORKERS}x${STRESS_LOAD}% demo env: DEMO_LIVE_HEAP_MB=${DEMO_LIVE_HEAP_MB:-default} DEMO_WORK_US=${DEMO_WORK_US:-default} DEMO_ALLOC_KB=${DEMO_ALLOC_KB:-default}"
echo "$HEADER"
# Repeats are interleaved (whole matrix, then again) so drift hits every point alike.
for rep in $(seq "$REPEATS"); do
  for p in "${POINTS[@]}"; do
    IFS='|' read -r label stress envs <<<"$p"
    for try in $(seq 0 "$RETRIES"); do
      run_point "$label" "$stress" "$envs" "$rep" && break
      [ "$try" -lt "$RETRIES" ] && log "$label rep $rep was noisy or failed; re-running"
    done
  done
done

# Summary: per label, p99 of each repeat.
python3 - "$OUT/results.tsv" <<'PY'
import csv, sys, collections
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
by = collections.OrderedDict()
for r in rows:
    by.setdefault(r['label'], []).append(r)
print('\nsummary: loadgen p99 ms of each clean run [noisy runs in brackets]')
for label, rs in by.items():
    clean = [f"{float(r['p99_ms']):.1f}" for r in rs if not r['noisy']]
    noisy = [f"{float(r['p99_ms']):.1f}" for r in rs if r['noisy']]
    extra = f"  [{' '.join(noisy)}]" if noisy else ''
    print(f"  {label:12s} {rs[0]['env']:28s} gmp={rs[0]['gmp']:>2s}  p99: {' '.join(clean)}{extra}")
PY
