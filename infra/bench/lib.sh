# Shared helpers of the load benchmarks (run-benchmarks.sh, inference_bench.sh). Source it from a
# script that runs with `set -euo pipefail`; it defines settings and functions and starts nothing.
#
# After sourcing: bench_setup_work (scratch dir WORK with RESULTS, process cleanup on exit), then
# bench_ensure_oha, bench_wait_for_quiet, and servers started as
#   "${SERVER_PREFIX[@]}" BINARY ARGS… &  PIDS+=("$!")
# so that $! is the server itself (taskset execs it): its PID is what gets stopped and whose CPU
# time is read.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NIMBUS_CACHE="${NIMBUS_CACHE:-$HOME/.cache/nimbus}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$NIMBUS_CACHE/target}"
TOOLS="$NIMBUS_CACHE/tools"
OHA_VERSION="1.16.0"
OHA="$TOOLS/bin/oha"
VENV="${VENV:-$NIMBUS_CACHE/venv}"
NCPU="$(nproc)"
if [[ -z "${BENCH_PIN:-}" ]]; then
  if ((NCPU >= 2)); then BENCH_PIN=1; else BENCH_PIN=0; fi
fi
TCK="$(getconf CLK_TCK)"

log() { printf '\n==> %s\n' "$*" >&2; }

# The pinned load generator, installed from crates.io into $TOOLS when missing.
bench_ensure_oha() {
  if ! [[ -x "$OHA" ]] || [[ "$("$OHA" --version)" != "oha $OHA_VERSION" ]]; then
    log "installing oha $OHA_VERSION into $TOOLS"
    cargo install oha --version "$OHA_VERSION" --locked --root "$TOOLS"
  fi
}

# --- scratch space and process cleanup -----------------------------------------------------------
PIDS=()
bench_cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [[ -n "${WORK:-}" ]]; then rm -rf "$WORK"; fi
}
# bench_setup_work PREFIX: a fresh scratch directory WORK (removed on exit) with RESULTS inside
bench_setup_work() {
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")"
  RESULTS="$WORK/results"
  mkdir -p "$RESULTS"
  trap bench_cleanup EXIT
}
stop() { # stop one process we started and forget it
  local pid keep=()
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  for pid in "${PIDS[@]}"; do [[ "$pid" == "$1" ]] || keep+=("$pid"); done
  PIDS=("${keep[@]}")
}

# bench_start_mock_openai BIN: the zero-latency OpenAI-compatible mock (nimbus-mock-openai) on a
# free port and the server CPUs, until it answers; sets MOCK_PORT and MOCK_PID
bench_start_mock_openai() {
  MOCK_PORT="$(free_port)"
  log "mock upstream on 127.0.0.1:$MOCK_PORT (CPUs $SERVER_CPUS)"
  "${SERVER_PREFIX[@]}" "$1" --port "$MOCK_PORT" 2>"$WORK/mock.log" &
  MOCK_PID=$!
  PIDS+=("$MOCK_PID")
  wait_http "http://127.0.0.1:$MOCK_PORT/health"
}

# bench_model_toml PORT: gateway configuration with no retries and model `bench` routed to the
# OpenAI-compatible mock on PORT (more sections may follow it)
bench_model_toml() {
  cat <<EOF
[gateway.retries]
max_retries = 0

[models.bench]
routing = ["mock"]

[models.bench.providers.mock]
type = "openai"
model_name = "mock-model"
api_base = "http://127.0.0.1:$1/v1"
api_key_location = "none"
EOF
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { # wait_http URL: until it answers at all (any status)
  local _
  for _ in $(seq 1 200); do
    if python3 - "$1" <<'EOF' 2>/dev/null; then return 0; fi
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1], timeout=0.5)
except urllib.error.HTTPError:
    pass
EOF
    sleep 0.05
  done
  echo "nothing answered at $1" >&2
  return 1
}

# CPU placement: the load generator gets CPU 0, the servers share the rest, so oha never steals
# cycles from what it measures. Same placement for every target.
if [[ "$BENCH_PIN" == 1 ]]; then
  OHA_CPUS="0"
  SERVER_CPUS="1-$((NCPU - 1))"
  OHA_PREFIX=(taskset -c "$OHA_CPUS" "$OHA" --worker-threads 1)
  SERVER_PREFIX=(taskset -c "$SERVER_CPUS")
else
  OHA_CPUS="all"
  SERVER_CPUS="all"
  OHA_PREFIX=("$OHA")
  SERVER_PREFIX=(env)
fi
oha_cmd() { "${OHA_PREFIX[@]}" "$@"; }

# cpu_ticks PID...: utime+stime of each process, in clock ticks, space separated
cpu_ticks() {
  local pid out=()
  for pid in "$@"; do out+=("$(awk '{print $14 + $15}' "/proc/$pid/stat")"); done
  echo "${out[*]}"
}

# run_oha NAME URL [oha args...]: one measured POST run (the body among the args: -d …), oha's
# JSON into $RESULTS/NAME.json and the CPU seconds each of SERVER_PIDS (named SERVER_NAMES) used
# meanwhile into $RESULTS/NAME.cpu.json
run_oha() {
  local name="$1" url="$2" before after
  shift 2
  log "oha $name"
  before="$(cpu_ticks "${SERVER_PIDS[@]}")"
  oha_cmd --no-tui --output-format json -o "$RESULTS/$name.json" \
    -m POST -H 'content-type: application/json' "$@" "$url"
  after="$(cpu_ticks "${SERVER_PIDS[@]}")"
  python3 - "$RESULTS/$name.cpu.json" "$TCK" "${SERVER_NAMES[*]}" "$before" "$after" <<'EOF'
import json, sys
out, tck, names, before, after = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5].split()
json.dump({n: (int(a) - int(b)) / tck for n, b, a in zip(names, before, after)}, open(out, "w"))
EOF
}

# --- other load on the machine ---------------------------------------------------------------------
# busy_ticks: CPU ticks the whole machine spent busy (user, nice, system, steal). Interrupt time is
# left out: loopback networking of the benchmark itself lands there, charged to no process.
busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $9}' /proc/stat; }
# snapshot: sets SNAPSHOT to "<busy ticks> <CPU s of every child this script reaped so far> <epoch s>".
# `times` must run in the sourcing shell, not in a $(…) subshell (whose children counters start
# at 0), hence the file.
snapshot() {
  times >"$WORK/times.txt"
  local children
  children="$(tail -n 1 "$WORK/times.txt" | awk '{
    split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.3f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }')"
  SNAPSHOT="$(busy_ticks) $children $(date +%s.%N)"
}
# other_cpu "SNAPSHOT AT START": "<other CPU s> <wall s>" since then; "other" is whatever the
# machine did that this script's processes (oha, servers, RIE, python) did not.
other_cpu() {
  snapshot
  python3 - "$1" "$SNAPSHOT" "$TCK" <<'EOF'
import sys
b0, c0, t0 = map(float, sys.argv[1].split())
b1, c1, t1 = map(float, sys.argv[2].split())
tck = float(sys.argv[3])
print(f"{max(0.0, (b1 - b0) / tck - (c1 - c0)):.2f} {t1 - t0:.2f}")
EOF
}
# bench_wait_for_quiet SECONDS: wait (up to SECONDS) until the machine is idle, < 10 % of one core
# busy over 5 s; sets QUIET_WAITED to the seconds waited.
bench_wait_for_quiet() {
  local limit="$1" b0 idle_ok
  QUIET_WAITED=0
  while :; do
    b0="$(busy_ticks)"
    sleep 5
    idle_ok="$(python3 -c "print(($(busy_ticks) - $b0) / $TCK / 5 < 0.10)")"
    [[ "$idle_ok" == True ]] && break
    QUIET_WAITED=$((QUIET_WAITED + 5))
    if ((QUIET_WAITED >= limit)); then
      log "the machine is still busy after ${limit}s; measuring anyway (see 'other load' in the report)"
      break
    fi
    if ((QUIET_WAITED % 30 == 0)); then log "waiting for the machine to go quiet (${QUIET_WAITED}s)"; fi
  done
}
