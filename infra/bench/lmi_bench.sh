#!/usr/bin/env bash
# Gateway overhead on an LMI model beside the OpenAI-compatible provider's (issue #12 §5).
# Two zero-latency mocks (nimbus-mock-openai, nimbus-mock-lmi), one `nimbus serve` with a model on
# each; fixed-rate oha runs, the targets interleaved. Each mock is also measured directly, so the
# gateway's overhead is (through the gateway) − (the mock directly) for each provider, and the
# LMI translation's cost is the difference of the two overheads. Writes section 8 of
# docs/benchmarks.md (between its markers; the other sections stay as they are).
#
#   bash infra/bench/lmi_bench.sh          (what `make bench-lmi` runs)
#
# Targets:
#   openai-direct  POST nimbus-mock-openai /v1/chat/completions directly (its baseline)
#   openai         POST /v1/chat/completions, model bench (type = "openai" on nimbus-mock-openai)
#   lmi-direct     POST nimbus-mock-lmi /invocations with the body the LMI provider sends (its baseline)
#   lmi            POST /v1/chat/completions, model bench-lmi (type = "lmi", rolling_batch schema)
#   sagemaker      POST /v1/chat/completions, model bench-sm (type = "sagemaker": the AWS SDK, SigV4,
#                  the mock's SageMaker runtime); not in the default list
#
# Knobs (environment):
#   LMI_BENCH_RATE      fixed request rate            (default 500 req/s)
#   LMI_BENCH_DURATION  length of one run             (default 10s)
#   LMI_BENCH_REPEATS   runs per target, interleaved  (default 3)
#   LMI_BENCH_TARGETS   targets to run, in order      (default "openai-direct openai lmi-direct lmi")
#   BENCH_CONNECTIONS   connections                   (default 50)
#   BENCH_PIN, BENCH_QUIET_WAIT, BENCH_SKIP_BUILD, BENCH_OUT, CARGO_TARGET_DIR: as in run-benchmarks.sh
set -euo pipefail

# shellcheck source=infra/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

RATE="${LMI_BENCH_RATE:-500}"
DURATION="${LMI_BENCH_DURATION:-10s}"
REPEATS="${LMI_BENCH_REPEATS:-3}"
read -r -a TARGETS <<<"${LMI_BENCH_TARGETS:-openai-direct openai lmi-direct lmi}"
CONNECTIONS="${BENCH_CONNECTIONS:-50}"
BENCH_OUT="${BENCH_OUT:-$ROOT/docs/benchmarks.md}"

# --- build and tools -----------------------------------------------------------------------------
if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  log "release build (nimbus-local, nimbus-bench)"
  cargo build --release -p nimbus-local -p nimbus-bench
fi
for bin in nimbus nimbus-mock-openai nimbus-mock-lmi; do
  [[ -x "$CARGO_TARGET_DIR/release/$bin" ]] || { echo "missing $CARGO_TARGET_DIR/release/$bin" >&2; exit 1; }
done
bench_ensure_oha
bench_setup_work nimbus-lmi-bench
# Run copies: a build into the same target dir while this runs must not swap what is measured.
mkdir -p "$WORK/bin"
for bin in nimbus nimbus-mock-openai nimbus-mock-lmi; do cp "$CARGO_TARGET_DIR/release/$bin" "$WORK/bin/"; done

# --- mocks and gateway -----------------------------------------------------------------------------
OPENAI_PORT="$(free_port)"
LMI_PORT="$(free_port)"
GATEWAY_PORT="$(free_port)"
log "mocks on 127.0.0.1:$OPENAI_PORT (OpenAI) and :$LMI_PORT (LMI), CPUs $SERVER_CPUS"
"${SERVER_PREFIX[@]}" "$WORK/bin/nimbus-mock-openai" --port "$OPENAI_PORT" 2>"$WORK/mock-openai.log" &
OPENAI_PID=$!
PIDS+=("$OPENAI_PID")
# Nothing recorded: the mock does no more per request than parse, answer and frame.
"${SERVER_PREFIX[@]}" "$WORK/bin/nimbus-mock-lmi" --port "$LMI_PORT" --record-limit 0 \
  >"$WORK/mock-lmi.out" 2>"$WORK/mock-lmi.log" &
LMI_PID=$!
PIDS+=("$LMI_PID")
wait_http "http://127.0.0.1:$OPENAI_PORT/health"
wait_http "http://127.0.0.1:$LMI_PORT/ping"

CONFIG="$WORK/config"
mkdir -p "$CONFIG"
bench_model_toml "$OPENAI_PORT" >"$CONFIG/nimbus.toml"
cat >>"$CONFIG/nimbus.toml" <<EOF

[models.bench-lmi]
routing = ["mock"]

[models.bench-lmi.providers.mock]
type = "lmi"
endpoint_url = "http://127.0.0.1:$LMI_PORT/invocations"

[models.bench-sm]
routing = ["mock"]

[models.bench-sm.providers.mock]
type = "sagemaker"
endpoint_name = "rolling-batch-bench"
region = "us-east-1"
EOF
"${SERVER_PREFIX[@]}" env AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME="http://127.0.0.1:$LMI_PORT" \
  AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true \
  RUST_LOG=warn "$WORK/bin/nimbus" serve --port "$GATEWAY_PORT" --config "$CONFIG/nimbus.toml" \
  --data-dir "$WORK/data" 2>>"$WORK/gateway.log" &
GATEWAY_PID=$!
PIDS+=("$GATEWAY_PID")
GATEWAY_URL="http://127.0.0.1:$GATEWAY_PORT"
wait_http "$GATEWAY_URL/health"
SERVER_PIDS=("$GATEWAY_PID" "$OPENAI_PID" "$LMI_PID")
SERVER_NAMES=(gateway mock-openai mock-lmi)

# --- what each target sends ------------------------------------------------------------------------
SYSTEM_TEXT="You are Ann, a concise assistant. Answer in one short sentence."
USER_TEXT="Say hello in one short sentence."
chat_body() { printf '%s' '{"model":"'"$1"'","messages":[{"role":"system","content":"'"$SYSTEM_TEXT"'"},{"role":"user","content":"'"$USER_TEXT"'"}]}'; }
declare -A BODIES URLS
BODIES[openai-direct]="$(chat_body mock-model)"
URLS[openai-direct]="http://127.0.0.1:$OPENAI_PORT/v1/chat/completions"
BODIES[openai]="$(chat_body bench)"
BODIES[lmi]="$(chat_body bench-lmi)"
BODIES[sagemaker]="$(chat_body bench-sm)"
for t in openai lmi sagemaker; do URLS[$t]="$GATEWAY_URL/v1/chat/completions"; done
URLS[lmi-direct]="http://127.0.0.1:$LMI_PORT/invocations"
for t in "${TARGETS[@]}"; do
  [[ -n "${URLS[$t]:-}" ]] || { echo "unknown target $t (openai-direct openai lmi-direct lmi sagemaker)" >&2; exit 1; }
done

# The direct LMI body is the one the provider sends: the mock records one gateway request (a
# second mock, recording, started only for this) and the benchmark replays it.
PROBE_PORT="$(free_port)"
"$WORK/bin/nimbus-mock-lmi" --port "$PROBE_PORT" >"$WORK/probe-mock.out" 2>&1 &
PROBE_MOCK_PID=$!
PIDS+=("$PROBE_MOCK_PID")
wait_http "http://127.0.0.1:$PROBE_PORT/ping"
PROBE_GATEWAY_PORT="$(free_port)"
sed "s/127.0.0.1:$LMI_PORT/127.0.0.1:$PROBE_PORT/" "$CONFIG/nimbus.toml" >"$WORK/probe.toml"
"$WORK/bin/nimbus" serve --port "$PROBE_GATEWAY_PORT" --config "$WORK/probe.toml" --data-dir "$WORK/probe-data" \
  2>>"$WORK/probe-gateway.log" &
PROBE_GATEWAY_PID=$!
PIDS+=("$PROBE_GATEWAY_PID")
wait_http "http://127.0.0.1:$PROBE_GATEWAY_PORT/health"
BODIES[lmi-direct]="$(python3 - "http://127.0.0.1:$PROBE_GATEWAY_PORT" "http://127.0.0.1:$PROBE_PORT" "${BODIES[lmi]}" <<'EOF'
import json, sys, urllib.request
gateway, mock, body = sys.argv[1:4]
req = urllib.request.Request(gateway + "/v1/chat/completions", data=body.encode(), headers={"content-type": "application/json"})
urllib.request.urlopen(req, timeout=10).read()
recorded = json.load(urllib.request.urlopen(mock + "/_requests", timeout=10))
print(json.dumps(recorded[-1]["body"], separators=(",", ":")))
EOF
)"
stop "$PROBE_GATEWAY_PID"
stop "$PROBE_MOCK_PID"

# Every target must answer with its mock's completion, in its own shape.
for t in "${TARGETS[@]}"; do
  python3 - "$t" "${URLS[$t]}" "${BODIES[$t]}" <<'EOF'
import json, sys, urllib.request
target, url, body = sys.argv[1:4]
req = urllib.request.Request(url, data=body.encode(), headers={"content-type": "application/json"}, method="POST")
with urllib.request.urlopen(req, timeout=5) as r:
    doc = json.load(r)
if target == "lmi-direct":
    ok = doc.get("generated_text") == "Hello from LMI"
else:
    expected = "Hello from the mock." if target.startswith("openai") else "Hello from LMI"
    ok = doc.get("object") == "chat.completion" and doc["choices"][0]["message"]["content"] == expected
if not ok:
    sys.exit(f"unexpected answer from target {target}: {doc}")
EOF
done

# --- measure -------------------------------------------------------------------------------------------
for t in "${TARGETS[@]}"; do
  run_oha "$t-warmup" "${URLS[$t]}" -d "${BODIES[$t]}" -z 2s -c "$CONNECTIONS"
done
bench_wait_for_quiet "${BENCH_QUIET_WAIT:-180}"
LOADAVG_START="$(cut -d' ' -f1-3 /proc/loadavg)"
START_TICKS="$(cpu_ticks "${SERVER_PIDS[@]}")"
snapshot
S1="$SNAPSHOT"
for rep in $(seq 1 "$REPEATS"); do
  for t in "${TARGETS[@]}"; do
    run_oha "$t-rate-$rep" "${URLS[$t]}" -d "${BODIES[$t]}" -z "$DURATION" -q "$RATE" \
      --latency-correction -c "$CONNECTIONS"
  done
done
END_TICKS="$(cpu_ticks "${SERVER_PIDS[@]}")"
other_cpu "$S1" >"$WORK/other.txt"
LOADAVG_END="$(cut -d' ' -f1-3 /proc/loadavg)"
for pid in "${SERVER_PIDS[@]}"; do stop "$pid"; done

# --- report ----------------------------------------------------------------------------------------------
COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD 2>/dev/null || COMMIT="$COMMIT + uncommitted changes"
for t in "${TARGETS[@]}"; do printf '%s' "${BODIES[$t]}" >"$RESULTS/$t.body.json"; done
TARGETS_S="${TARGETS[*]}" START_TICKS="$START_TICKS" END_TICKS="$END_TICKS" TCK="$TCK" OTHER="$(cat "$WORK/other.txt")" QUIET_WAITED="$QUIET_WAITED" \
  LOADAVG_START="$LOADAVG_START" LOADAVG_END="$LOADAVG_END" RATE="$RATE" DURATION="$DURATION" \
  REPEATS="$REPEATS" CONNECTIONS="$CONNECTIONS" NCPU="$NCPU" BENCH_PIN="$BENCH_PIN" OHA_CPUS="$OHA_CPUS" \
  SERVER_CPUS="$SERVER_CPUS" OHA_V="$("$OHA" --version)" RUSTC_V="$(rustc --version)" COMMIT="$COMMIT" \
  python3 - "$RESULTS/meta.json" "$CONFIG/nimbus.toml" <<'EOF'
import datetime, json, os, sys
e = os.environ
other, wall = (float(x) for x in e["OTHER"].split())
# The servers are not reaped yet when "other" is measured: take their CPU out of it.
servers = sum(int(b) - int(a) for a, b in zip(e["START_TICKS"].split(), e["END_TICKS"].split())) / int(e["TCK"])
other = max(0.0, other - servers)
json.dump({
    "targets": e["TARGETS_S"].split(),
    "rate": int(e["RATE"]),
    "duration": e["DURATION"],
    "repeats": int(e["REPEATS"]),
    "connections": int(e["CONNECTIONS"]),
    "nproc": int(e["NCPU"]),
    "pin": e["BENCH_PIN"] == "1",
    "oha_cpus": e["OHA_CPUS"],
    "server_cpus": e["SERVER_CPUS"],
    "oha": e["OHA_V"],
    "rustc": e["RUSTC_V"],
    "commit": e["COMMIT"],
    "loadavg_start": e["LOADAVG_START"],
    "loadavg_end": e["LOADAVG_END"],
    "quiet_waited_s": int(e["QUIET_WAITED"]),
    # CPU seconds of processes other than this script's (including its servers) while measuring
    "other_cpu": [other, wall],
    "measured_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    "config": open(sys.argv[2]).read(),
}, open(sys.argv[1], "w"), indent=2)
EOF
python3 infra/bench/lmi_report.py --results "$RESULTS" --doc "$BENCH_OUT"

: "${NIMBUS_CACHE:?}" "${RESULTS:?}" "${WORK:?}"
KEEP="$NIMBUS_CACHE/bench/lmi-latest"
rm -rf "$KEEP"
mkdir -p "$KEEP"
cp -r "$RESULTS"/. "$KEEP"/
cp "$WORK"/*.log "$KEEP"/ 2>/dev/null || true
log "wrote section 8 of $BENCH_OUT (raw results in $KEEP)"
