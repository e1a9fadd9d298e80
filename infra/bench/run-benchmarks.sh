#!/usr/bin/env bash
# Nimbus benchmarks: gateway overhead against a zero-latency upstream, Lambda cold start under the
# Runtime Interface Emulator, files API throughput, and batches (infra/bench/batch_bench.py).
# Rewrites docs/benchmarks.md from the measurements.
#
#   bash infra/bench/run-benchmarks.sh          (what `make bench` runs)
#
# Knobs (environment):
#   CARGO_TARGET_DIR   build outputs            (default ~/.cache/nimbus/target)
#   NIMBUS_CACHE       tools and venv           (default ~/.cache/nimbus)
#   BENCH_DURATION     fixed-rate run length    (default 15s)
#   BENCH_REPEATS      fixed-rate runs per target, interleaved (default 3)
#   BENCH_RATE         fixed request rate       (default 2000 req/s)
#   BENCH_CONNECTIONS  connections at fixed rate (default 50)
#   BENCH_MAX_DURATION length of each max-throughput run (default 10s)
#   BENCH_MAX_CONNECTIONS  connection counts for max throughput (default "10 50 200")
#   BENCH_PIN          1: oha on CPU 0, servers on the other CPUs (default 1 when >= 2 CPUs)
#   BENCH_COLD_RUNS    cold starts per function (default 10)
#   BENCH_SKIP_BUILD   1: use the binaries already built
#   BENCH_SKIP_BATCHES 1: skip the batch benchmarks (the batches section of BENCH_OUT is kept as it is)
#   BENCH_QUIET_WAIT   seconds to wait for an idle machine before measuring (default 180)
#   RIE                path of aws-lambda-rie-x86_64 (default: from the SAM CLI in the venv)
#   BENCH_OUT          markdown to write        (default docs/benchmarks.md)
#
# Section 6 (`/inference` overhead) has its own script, infra/bench/inference_bench.sh
# (`make bench-inference`); this one keeps that section as it is.
set -euo pipefail

# shellcheck source=infra/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

BENCH_DURATION="${BENCH_DURATION:-15s}"
BENCH_REPEATS="${BENCH_REPEATS:-3}"
BENCH_RATE="${BENCH_RATE:-2000}"
BENCH_CONNECTIONS="${BENCH_CONNECTIONS:-50}"
BENCH_MAX_DURATION="${BENCH_MAX_DURATION:-10s}"
BENCH_MAX_CONNECTIONS="${BENCH_MAX_CONNECTIONS:-10 50 200}"
BENCH_COLD_RUNS="${BENCH_COLD_RUNS:-10}"
BENCH_OUT="${BENCH_OUT:-$ROOT/docs/benchmarks.md}"

# --- build -------------------------------------------------------------------------------------
# The functions are built on their own, as `sam build` builds them (the workspace's default
# members): built with the local server, they would carry its features (the OpenAPI document).
FUNCTION_PACKAGES=(-p nimbus-inference)
if [[ "${BENCH_SKIP_BATCHES:-0}" != 1 ]]; then
  # The batch benchmark runs the batch path's Lambda functions too.
  FUNCTION_PACKAGES+=(-p nimbus-files -p nimbus-batches -p nimbus-worker -p nimbus-poller)
fi
if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  log "release build (${FUNCTION_PACKAGES[*]}; then nimbus-local, nimbus-bench)"
  cargo build --release "${FUNCTION_PACKAGES[@]}"
  cargo build --release -p nimbus-local -p nimbus-bench
fi
REL="$CARGO_TARGET_DIR/release"
GATEWAY="$REL/nimbus"
MOCK="$REL/nimbus-mock-openai"
INFERENCE="$REL/nimbus-inference"
HELLO="$REL/nimbus-hello-lambda"
for bin in "$GATEWAY" "$MOCK" "$INFERENCE" "$HELLO"; do
  [[ -x "$bin" ]] || { echo "missing $bin" >&2; exit 1; }
done

# --- tools -------------------------------------------------------------------------------------
bench_ensure_oha
if [[ -z "${RIE:-}" ]]; then
  RIE=""
  for candidate in "$VENV"/lib/python3*/site-packages/samcli/local/rapid/aws-lambda-rie-x86_64; do
    [[ -x "$candidate" ]] && RIE="$candidate" && break
  done
fi
if [[ -z "$RIE" || ! -x "$RIE" ]]; then
  echo "aws-lambda-rie-x86_64 not found: run \`make test-deps\` (SAM CLI in $VENV) or set RIE=/path" >&2
  exit 1
fi

# --- scratch space and process cleanup -----------------------------------------------------------
bench_setup_work nimbus-bench
# report.py rewrites BENCH_OUT from scratch: keep the old one, whose batches and `/inference`
# sections stay when those benchmarks are not rerun.
cp "$BENCH_OUT" "$WORK/previous-benchmarks.md" 2>/dev/null || true

BODY='{"model":"bench","messages":[{"role":"user","content":"Say hello in one short sentence."}]}'

warmup() { oha_cmd --no-tui --output-format quiet -m POST -H 'content-type: application/json' -d "$BODY" -z 2s -c "$BENCH_CONNECTIONS" "$1"; }

# --- other load on the machine ---------------------------------------------------------------------
# Wait (up to BENCH_QUIET_WAIT seconds) until the machine is idle.
bench_wait_for_quiet "${BENCH_QUIET_WAIT:-180}"
LOADAVG_START="$(cut -d' ' -f1-3 /proc/loadavg)"
snapshot
S1="$SNAPSHOT"

# --- 1. gateway overhead -------------------------------------------------------------------------
# One mock, and two gateways in front of it (default logging, and RUST_LOG=warn to see what the
# per-request tracing span costs). All three stay up for the whole section; an idle server costs
# nothing, so the targets can be interleaved and repeated, which spreads the VM's noise evenly.
bench_start_mock_openai "$MOCK"
bench_model_toml "$MOCK_PORT" >"$WORK/nimbus.toml"

# start_gateway NAME RUST_LOG: a gateway with its own fresh data dir on a free port; sets GATEWAY_URL, GATEWAY_PID
start_gateway() {
  local port
  port="$(free_port)"
  RUST_LOG="$2" "${SERVER_PREFIX[@]}" "$GATEWAY" serve --port "$port" --config "$WORK/nimbus.toml" \
    --data-dir "$WORK/data-$1" 2>>"$WORK/$1.log" &
  GATEWAY_PID=$!
  PIDS+=("$GATEWAY_PID")
  GATEWAY_URL="http://127.0.0.1:$port/v1/chat/completions"
  wait_http "http://127.0.0.1:$port/health"
  # The answer must be a real completion from the mock, not an error.
  python3 - "$GATEWAY_URL" "$BODY" <<'EOF'
import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(),
                             headers={"content-type": "application/json"}, method="POST")
with urllib.request.urlopen(req, timeout=5) as r:
    doc = json.load(r)
if doc.get("object") != "chat.completion" or doc.get("model") != "bench":
    sys.exit(f"unexpected answer from the gateway: {doc}")
EOF
}

log "gateways on CPUs $SERVER_CPUS"
start_gateway gateway info
GATEWAY_INFO_PID="$GATEWAY_PID"
declare -A URLS
URLS[baseline]="http://127.0.0.1:$MOCK_PORT/v1/chat/completions"
URLS[gateway]="$GATEWAY_URL"
start_gateway gateway-warn warn
URLS[gateway-warn]="$GATEWAY_URL"
SERVER_PIDS=("$MOCK_PID" "$GATEWAY_INFO_PID" "$GATEWAY_PID")
SERVER_NAMES=(mock gateway gateway-warn)
TARGETS=(baseline gateway gateway-warn)

for target in "${TARGETS[@]}"; do warmup "${URLS[$target]}"; done
for rep in $(seq 1 "$BENCH_REPEATS"); do
  for target in "${TARGETS[@]}"; do
    run_oha "$target-rate-$rep" "${URLS[$target]}" -d "$BODY" -z "$BENCH_DURATION" -q "$BENCH_RATE" \
      --latency-correction -c "$BENCH_CONNECTIONS"
  done
done
for c in $BENCH_MAX_CONNECTIONS; do
  for target in "${TARGETS[@]}"; do
    run_oha "$target-max-c$c" "${URLS[$target]}" -d "$BODY" -z "$BENCH_MAX_DURATION" -c "$c"
  done
done
for pid in "${SERVER_PIDS[@]}"; do stop "$pid"; done
other_cpu "$S1" >"$WORK/other1.txt"
OTHER_GATEWAY="$(cat "$WORK/other1.txt")"

# --- 2. cold start ---------------------------------------------------------------------------------
log "cold start under the RIE ($BENCH_COLD_RUNS runs each)"
snapshot
S2="$SNAPSHOT"
python3 infra/bench/coldstart.py --rie "$RIE" --nimbus "$INFERENCE" --hello "$HELLO" \
  --event infra/events/inference-health.json --runs "$BENCH_COLD_RUNS" \
  --workdir "$WORK/coldstart" --out "$RESULTS/coldstart.json"
other_cpu "$S2" >"$WORK/other2.txt"
OTHER_COLD="$(cat "$WORK/other2.txt")"

# --- 3. report -------------------------------------------------------------------------------------
LOADAVG_END="$(cut -d' ' -f1-3 /proc/loadavg)"
COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD 2>/dev/null || COMMIT="$COMMIT + uncommitted changes"
NCPU="$NCPU" BENCH_PIN="$BENCH_PIN" OHA_CPUS="$OHA_CPUS" SERVER_CPUS="$SERVER_CPUS" \
  BENCH_RATE="$BENCH_RATE" BENCH_DURATION="$BENCH_DURATION" BENCH_CONNECTIONS="$BENCH_CONNECTIONS" \
  BENCH_REPEATS="$BENCH_REPEATS" BENCH_MAX_DURATION="$BENCH_MAX_DURATION" \
  BENCH_MAX_CONNECTIONS="$BENCH_MAX_CONNECTIONS" BODY="$BODY" OHA_V="$("$OHA" --version)" \
  RUSTC_V="$(rustc --version)" RIE="$RIE" COMMIT="$COMMIT" \
  LOADAVG_START="$LOADAVG_START" LOADAVG_END="$LOADAVG_END" OTHER_GATEWAY="$OTHER_GATEWAY" \
  OTHER_COLD="$OTHER_COLD" QUIET_WAITED="$QUIET_WAITED" \
  python3 - "$RESULTS/meta.json" <<'EOF'
import datetime, json, os, sys
e = os.environ
json.dump({
    "nproc": int(e["NCPU"]),
    "pin": e["BENCH_PIN"] == "1",
    "oha_cpus": e["OHA_CPUS"],
    "server_cpus": e["SERVER_CPUS"],
    "rate": int(e["BENCH_RATE"]),
    "duration": e["BENCH_DURATION"],
    "connections": int(e["BENCH_CONNECTIONS"]),
    "repeats": int(e["BENCH_REPEATS"]),
    "max_duration": e["BENCH_MAX_DURATION"],
    "max_connections": [int(c) for c in e["BENCH_MAX_CONNECTIONS"].split()],
    "body": e["BODY"],
    "oha": e["OHA_V"],
    "rustc": e["RUSTC_V"],
    "rie": e["RIE"],
    "commit": e["COMMIT"],
    "loadavg_start": e["LOADAVG_START"],
    "loadavg_end": e["LOADAVG_END"],
    "quiet_waited_s": int(e["QUIET_WAITED"]),
    "measured_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    # CPU seconds used by processes other than this script's, and the wall seconds, per section
    "other_cpu": {
        "gateway": [float(x) for x in e["OTHER_GATEWAY"].split()],
        "coldstart": [float(x) for x in e["OTHER_COLD"].split()],
    },
}, open(sys.argv[1], "w"), indent=2)
EOF
python3 infra/bench/report.py --results "$RESULTS" --out "$BENCH_OUT"

# --- 3. files API: throughput and peak memory ---------------------------------------------------------
log "files API: upload/download throughput and peak memory"
"$VENV/bin/python" infra/bench/files_bench.py --nimbus "$GATEWAY" --out "$WORK/files.md"
{ printf '\n'; sed -e '1s/^# /## 3. /' -e 's/^## /### /' "$WORK/files.md"; } >>"$BENCH_OUT"

# --- 4. batches: validation throughput, a 50,000-line batch, AWS requests per batch --------------------
if [[ "${BENCH_SKIP_BATCHES:-0}" != 1 ]]; then
  log "batches: validation throughput and memory, a 50,000-line batch locally, AWS requests per batch"
  "$VENV/bin/python" infra/bench/batch_bench.py --bin-dir "$REL" --doc "$BENCH_OUT"
elif [[ -f "$WORK/previous-benchmarks.md" ]]; then
  python3 infra/bench/batch_bench.py --splice-from "$WORK/previous-benchmarks.md" --doc "$BENCH_OUT"
fi

# --- 5. memory under hostile load -------------------------------------------------------------------
log "memory of the local server across repeated hostile runs"
"$VENV/bin/python" infra/bench/hostile_memory.py --nimbus "$GATEWAY" --runs 5 --settle 12 --doc "$BENCH_OUT"

# --- 6. `/inference` overhead: its own benchmark (make bench-inference); keep its section ---------------
if [[ -f "$WORK/previous-benchmarks.md" ]]; then
  python3 infra/bench/inference_report.py --splice-from "$WORK/previous-benchmarks.md" --doc "$BENCH_OUT"
fi

# --- 7. async inference: its own benchmark (make bench-async); keep its section -------------------------
if [[ -f "$WORK/previous-benchmarks.md" ]]; then
  python3 infra/bench/async_bench.py --splice-from "$WORK/previous-benchmarks.md" --doc "$BENCH_OUT"
fi

# --- 8. LMI provider overhead: its own benchmark (make bench-lmi); keep its section -------------------
if [[ -f "$WORK/previous-benchmarks.md" ]]; then
  python3 infra/bench/lmi_report.py --splice-from "$WORK/previous-benchmarks.md" --doc "$BENCH_OUT"
fi

# Never let an empty variable turn these paths into "/" (a copy of the whole machine).
: "${NIMBUS_CACHE:?}" "${RESULTS:?}" "${WORK:?}"
KEEP="$NIMBUS_CACHE/bench/latest"
rm -rf "$KEEP"
mkdir -p "$KEEP"
cp -r "$RESULTS"/. "$KEEP"/
cp "$WORK"/*.log "$KEEP"/ 2>/dev/null || true
log "wrote $BENCH_OUT (raw results in $KEEP)"
