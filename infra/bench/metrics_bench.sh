#!/usr/bin/env bash
# What measuring costs (issue #14): the gateway's latency with metrics dropped, kept for
# `GET /metrics` (the local server's Prometheus sink), and written as CloudWatch EMF lines on stdout
# (what every Lambda function does). One zero-latency mock upstream; one `nimbus serve` per sink,
# each with its own data dir, all on the same CPUs; fixed-rate oha runs on /v1/chat/completions,
# the sinks interleaved. Writes section 10 of docs/benchmarks.md (between its markers).
#
#   bash infra/bench/metrics_bench.sh          (what `make bench-metrics` runs)
#
# Knobs (environment):
#   METRICS_BENCH_RATE      fixed request rate            (default 1000 req/s)
#   METRICS_BENCH_DURATION  length of one run             (default 15s)
#   METRICS_BENCH_REPEATS   runs per sink, interleaved    (default 3)
#   BENCH_CONNECTIONS       connections                   (default 50)
#   BENCH_PIN, BENCH_QUIET_WAIT, BENCH_SKIP_BUILD, BENCH_OUT, CARGO_TARGET_DIR: as in run-benchmarks.sh
set -euo pipefail

# shellcheck source=infra/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

RATE="${METRICS_BENCH_RATE:-1000}"
DURATION="${METRICS_BENCH_DURATION:-15s}"
REPEATS="${METRICS_BENCH_REPEATS:-3}"
CONNECTIONS="${BENCH_CONNECTIONS:-50}"
BENCH_OUT="${BENCH_OUT:-$ROOT/docs/benchmarks.md}"
SINKS=(off prometheus emf)

if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  log "release build (nimbus-local, nimbus-bench)"
  cargo build --release -p nimbus-local -p nimbus-bench
fi
bench_ensure_oha
bench_setup_work nimbus-metrics-bench
mkdir -p "$WORK/bin"
cp "$CARGO_TARGET_DIR/release/nimbus" "$CARGO_TARGET_DIR/release/nimbus-mock-openai" "$WORK/bin/"

bench_start_mock_openai "$WORK/bin/nimbus-mock-openai"
bench_model_toml "$MOCK_PORT" >"$WORK/nimbus.toml"
BODY='{"model":"bench","messages":[{"role":"user","content":"Say hello in one short sentence."}]}'

declare -A URLS GATEWAY_PIDS
SERVER_PIDS=("$MOCK_PID")
SERVER_NAMES=(mock)
for sink in "${SINKS[@]}"; do
  port="$(free_port)"
  # stdout carries the EMF lines (the log lines go to stderr unless NIMBUS_LOG_FORMAT says otherwise).
  NIMBUS_METRICS="$sink" "${SERVER_PREFIX[@]}" "$WORK/bin/nimbus" serve --port "$port" \
    --config "$WORK/nimbus.toml" --data-dir "$WORK/data-$sink" >"$WORK/stdout-$sink.log" 2>"$WORK/gateway-$sink.log" &
  GATEWAY_PIDS[$sink]=$!
  PIDS+=("$!")
  SERVER_PIDS+=("$!")
  SERVER_NAMES+=("$sink")
  URLS[$sink]="http://127.0.0.1:$port/v1/chat/completions"
  wait_http "http://127.0.0.1:$port/health"
done

for sink in "${SINKS[@]}"; do
  run_oha "$sink-warmup" "${URLS[$sink]}" -d "$BODY" -z 2s -c "$CONNECTIONS"
done
bench_wait_for_quiet "${BENCH_QUIET_WAIT:-180}"
for rep in $(seq 1 "$REPEATS"); do
  for sink in "${SINKS[@]}"; do
    run_oha "$sink-rate-$rep" "${URLS[$sink]}" -d "$BODY" -z "$DURATION" -q "$RATE" --latency-correction -c "$CONNECTIONS"
  done
done

# What each sink kept: the Prometheus text, and the EMF lines written per request.
PROM_URL="${URLS[prometheus]%/v1/chat/completions}/metrics"
python3 - "$PROM_URL" "$RESULTS/prometheus.metrics.txt" <<'PY'
import sys, urllib.request
open(sys.argv[2], "w").write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())
PY
grep -c '"_aws"' "$WORK/stdout-emf.log" >"$RESULTS/emf.lines.txt" || echo 0 >"$RESULTS/emf.lines.txt"
for sink in "${SINKS[@]}"; do
  awk '/^VmRSS:/{print $2}' "/proc/${GATEWAY_PIDS[$sink]}/status" >"$RESULTS/$sink.rss_kib.txt"
done
for pid in "${SERVER_PIDS[@]}"; do stop "$pid"; done

COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD 2>/dev/null || COMMIT="$COMMIT + uncommitted changes"
python3 infra/bench/metrics_report.py --results "$RESULTS" --doc "$BENCH_OUT" --rate "$RATE" \
  --duration "$DURATION" --repeats "$REPEATS" --connections "$CONNECTIONS" --commit "$COMMIT" \
  --oha "$("$OHA" --version)" --nproc "$NCPU"
log "wrote section 10 of $BENCH_OUT"
