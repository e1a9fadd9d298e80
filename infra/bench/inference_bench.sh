#!/usr/bin/env bash
# `/inference` overhead beside `/v1/chat/completions`, and what storing records costs (issue #9 §6).
# One zero-latency mock upstream; one `nimbus serve` per target, each with its own fresh data dir,
# all on the same CPUs; fixed-rate oha runs, the targets interleaved. Writes section 6 of
# docs/benchmarks.md (between its markers; the other sections stay as they are).
#
#   bash infra/bench/inference_bench.sh          (what `make bench-inference` runs)
#
# Targets:
#   chat       POST /v1/chat/completions, model bench (the reference)
#   inference  POST /inference, function bench_chat (templated system, records stored, cache write_only)
#   dryrun     the same with "dryrun": true (nothing stored, nothing cached)
#   model      POST /inference, model_name bench (the passthrough function, records stored)
#   nocache    the same as inference with cache_options.enabled = "off" (records, no cache write)
#
# Knobs (environment):
#   INFERENCE_BENCH_RATE      fixed request rate            (default 1000 req/s)
#   INFERENCE_BENCH_DURATION  length of one run             (default 15s)
#   INFERENCE_BENCH_REPEATS   runs per target, interleaved  (default 3)
#   INFERENCE_BENCH_TARGETS   targets to run, in order      (default "chat inference dryrun model nocache")
#   BENCH_CONNECTIONS         connections                   (default 50)
#   BENCH_PIN, BENCH_QUIET_WAIT, BENCH_SKIP_BUILD, BENCH_OUT, CARGO_TARGET_DIR: as in run-benchmarks.sh
set -euo pipefail

# shellcheck source=infra/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

RATE="${INFERENCE_BENCH_RATE:-1000}"
DURATION="${INFERENCE_BENCH_DURATION:-15s}"
REPEATS="${INFERENCE_BENCH_REPEATS:-3}"
read -r -a TARGETS <<<"${INFERENCE_BENCH_TARGETS:-chat inference dryrun model nocache}"
CONNECTIONS="${BENCH_CONNECTIONS:-50}"
BENCH_OUT="${BENCH_OUT:-$ROOT/docs/benchmarks.md}"

# --- build and tools -----------------------------------------------------------------------------
if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  log "release build (nimbus-local, nimbus-bench)"
  cargo build --release -p nimbus-local -p nimbus-bench
fi
for bin in nimbus nimbus-mock-openai; do
  [[ -x "$CARGO_TARGET_DIR/release/$bin" ]] || { echo "missing $CARGO_TARGET_DIR/release/$bin" >&2; exit 1; }
done
bench_ensure_oha
bench_setup_work nimbus-inference-bench
# Run copies: a build into the same target dir while this runs must not swap what is measured.
mkdir -p "$WORK/bin"
cp "$CARGO_TARGET_DIR/release/nimbus" "$CARGO_TARGET_DIR/release/nimbus-mock-openai" "$WORK/bin/"
GATEWAY="$WORK/bin/nimbus"
MOCK="$WORK/bin/nimbus-mock-openai"

# --- what each target sends ------------------------------------------------------------------------
# The function renders the same system message the chat target sends, so the mock gets the same
# conversation from every target.
SYSTEM_TEXT="You are Ann, a concise assistant. Answer in one short sentence."
USER_TEXT="Say hello in one short sentence."
FUNCTION_BODY='{"function_name":"bench_chat","input":{"system":{"assistant_name":"Ann"},"messages":[{"role":"user","content":"'"$USER_TEXT"'"}]}'
declare -A BODIES PATHS
BODIES[chat]='{"model":"bench","messages":[{"role":"system","content":"'"$SYSTEM_TEXT"'"},{"role":"user","content":"'"$USER_TEXT"'"}]}'
BODIES[inference]="$FUNCTION_BODY}"
BODIES[dryrun]="$FUNCTION_BODY"',"dryrun":true}'
BODIES[model]='{"model_name":"bench","input":{"system":"'"$SYSTEM_TEXT"'","messages":[{"role":"user","content":"'"$USER_TEXT"'"}]}}'
BODIES[nocache]="$FUNCTION_BODY"',"cache_options":{"enabled":"off"}}'
PATHS[chat]=/v1/chat/completions
for t in inference dryrun model nocache; do PATHS[$t]=/inference; done
for t in "${TARGETS[@]}"; do
  [[ -n "${BODIES[$t]:-}" ]] || { echo "unknown target $t (chat inference dryrun model nocache)" >&2; exit 1; }
done

# --- mock and gateways -------------------------------------------------------------------------------
bench_start_mock_openai "$MOCK"

CONFIG="$WORK/config"
mkdir -p "$CONFIG/bench_chat"
bench_model_toml "$MOCK_PORT" >"$CONFIG/nimbus.toml"
cat >>"$CONFIG/nimbus.toml" <<EOF

[functions.bench_chat]
type = "chat"
system_schema = "bench_chat/system_schema.json"

[functions.bench_chat.variants.main]
type = "chat_completion"
model = "bench"
system_template = "bench_chat/system.minijinja"
EOF
cat >"$CONFIG/bench_chat/system_schema.json" <<'EOF'
{
  "type": "object",
  "properties": { "assistant_name": { "type": "string", "minLength": 1, "maxLength": 64 } },
  "required": ["assistant_name"],
  "additionalProperties": false
}
EOF
printf '%s\n' "You are {{ assistant_name }}, a concise assistant. Answer in one short sentence." \
  >"$CONFIG/bench_chat/system.minijinja"

declare -A URLS BASES DATA GATEWAY_PIDS
for t in "${TARGETS[@]}"; do
  port="$(free_port)"
  DATA[$t]="$WORK/data-$t"
  "${SERVER_PREFIX[@]}" "$GATEWAY" serve --port "$port" --config "$CONFIG/nimbus.toml" \
    --data-dir "${DATA[$t]}" 2>>"$WORK/gateway-$t.log" &
  GATEWAY_PIDS[$t]=$!
  PIDS+=("$!")
  BASES[$t]="http://127.0.0.1:$port"
  URLS[$t]="${BASES[$t]}${PATHS[$t]}"
  wait_http "${BASES[$t]}/health"
done
SERVER_PIDS=("$MOCK_PID")
SERVER_NAMES=(mock)
for t in "${TARGETS[@]}"; do
  SERVER_PIDS+=("${GATEWAY_PIDS[$t]}")
  SERVER_NAMES+=("$t")
done

# Every target must answer with the mock's completion, in its own shape. The stored-or-not check
# of one answer's record comes after the runs.
for t in "${TARGETS[@]}"; do
  python3 - "$t" "${URLS[$t]}" "${BODIES[$t]}" "$RESULTS/probe-$t.json" <<'EOF'
import json, sys, urllib.request
target, url, body, out = sys.argv[1:5]
req = urllib.request.Request(url, data=body.encode(), headers={"content-type": "application/json"}, method="POST")
with urllib.request.urlopen(req, timeout=5) as r:
    doc = json.load(r)
if target == "chat":
    ok = doc.get("object") == "chat.completion" and doc["choices"][0]["message"]["content"] == "Hello from the mock."
else:
    ok = doc.get("content") == [{"type": "text", "text": "Hello from the mock."}] and "inference_id" in doc
if not ok:
    sys.exit(f"unexpected answer from target {target}: {doc}")
json.dump(doc, open(out, "w"))
EOF
done

# stored_counts TARGET: "<inference records> <model cache entries>" in that gateway's database
stored_counts() {
  python3 - "${DATA[$1]}/state.sqlite3" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=10)
count = lambda kind: db.execute("SELECT count(*) FROM records WHERE kind = ?", (kind,)).fetchone()[0]
print(count("inference"), count("model_cache"))
EOF
}
# answered NAME: "<200s> <requests cut off by oha's deadline>" of one oha run (the server may
# have finished the cut-off ones, and stored their records)
answered() {
  python3 - "$RESULTS/$1.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
print(doc["statusCodeDistribution"].get("200", 0), doc.get("errorDistribution", {}).get("aborted due to deadline", 0))
EOF
}
# settle TARGET: wait (up to 60 s) until that gateway is idle (at most 2 % of a core over 0.5 s),
# i.e. the work it deferred past its responses is done; prints the seconds it took
settle() {
  local pid="${GATEWAY_PIDS[$1]}" started now before after
  started="$(date +%s.%N)"
  while :; do
    before="$(cpu_ticks "$pid")"
    sleep 0.5
    after="$(cpu_ticks "$pid")"
    now="$(date +%s.%N)"
    if python3 -c "import sys; sys.exit(0 if ($after - $before) / $TCK <= 0.01 or $now - $started > 60 else 1)"; then
      break
    fi
  done
  python3 -c "print(f'{max(0.0, $now - $started - 0.5):.1f}')"
}

# --- measure -------------------------------------------------------------------------------------------
# SENT: the 200s each gateway gave; CUT: requests oha cut off at a deadline (finished or not)
declare -A SENT CUT
for t in "${TARGETS[@]}"; do
  run_oha "$t-warmup" "${URLS[$t]}" -d "${BODIES[$t]}" -z 2s -c "$CONNECTIONS"
  read -r ok cut <<<"$(answered "$t-warmup")"
  SENT[$t]=$((ok + 1)) # + the probe
  CUT[$t]=$cut
  settle "$t" >/dev/null
done
bench_wait_for_quiet "${BENCH_QUIET_WAIT:-180}"
LOADAVG_START="$(cut -d' ' -f1-3 /proc/loadavg)"
START_TICKS="$(cpu_ticks "${SERVER_PIDS[@]}")"
snapshot
S1="$SNAPSHOT"
# Each run is followed by its gateway's deferred work (records, cache entries) until the gateway
# is idle, so that no run pays for the previous target's writes; that wait and its CPU are kept.
for rep in $(seq 1 "$REPEATS"); do
  for t in "${TARGETS[@]}"; do
    before_run="$(cpu_ticks "${GATEWAY_PIDS[$t]}")"
    run_oha "$t-rate-$rep" "${URLS[$t]}" -d "${BODIES[$t]}" -z "$DURATION" -q "$RATE" \
      --latency-correction -c "$CONNECTIONS"
    read -r ok cut <<<"$(answered "$t-rate-$rep")"
    SENT[$t]=$((${SENT[$t]} + ok))
    CUT[$t]=$((${CUT[$t]} + cut))
    # Records already written when the run ended: how far the writes after the response lag.
    read -r records_at_end _ <<<"$(stored_counts "$t")"
    settle_s="$(settle "$t")"
    after_settle="$(cpu_ticks "${GATEWAY_PIDS[$t]}")"
    read -r records_settled _ <<<"$(stored_counts "$t")"
    printf '{"answered": %s, "cut_off": %s, "records_at_end": %s, "records_settled": %s, "settle_s": %s, "cpu_with_deferred_s": %s}\n' \
      "${SENT[$t]}" "${CUT[$t]}" "$records_at_end" "$records_settled" "$settle_s" \
      "$(python3 -c "print(($after_settle - $before_run) / $TCK)")" >"$RESULTS/$t-rate-$rep.deferred.json"
  done
done
END_TICKS="$(cpu_ticks "${SERVER_PIDS[@]}")"
other_cpu "$S1" >"$WORK/other.txt"
LOADAVG_END="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- records: every answered request of a storing target has one; none for the dry run ------------
log "checking the stored records"
for t in "${TARGETS[@]}"; do
  rss_kib="$(awk '/^VmRSS:/{print $2}' "/proc/${GATEWAY_PIDS[$t]}/status")"
  if [[ "$t" == chat ]]; then
    echo "{\"answered\": ${SENT[$t]}, \"cut_off\": ${CUT[$t]}, \"rss_kib\": $rss_kib}" >"$RESULTS/$t.records.json"
    continue
  fi
  read -r records cache_entries <<<"$(stored_counts "$t")"
  probe_id="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["inference_id"])' "$RESULTS/probe-$t.json")"
  probe_status="$(python3 - "${BASES[$t]}/inferences/$probe_id" <<'EOF'
import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=5).status)
except urllib.error.HTTPError as e:
    print(e.code)
EOF
)"
  echo "{\"answered\": ${SENT[$t]}, \"cut_off\": ${CUT[$t]}, \"records\": $records," \
    "\"cache_entries\": $cache_entries, \"probe_record_status\": $probe_status, \"rss_kib\": $rss_kib}" \
    >"$RESULTS/$t.records.json"
  log "$t: ${SENT[$t]} answered (+ ${CUT[$t]} cut off), $records records, $cache_entries cache entries, GET /inferences/{probe} → $probe_status"
done
for pid in "${SERVER_PIDS[@]}"; do stop "$pid"; done

# --- report ----------------------------------------------------------------------------------------------
COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD 2>/dev/null || COMMIT="$COMMIT + uncommitted changes"
TARGETS_S="${TARGETS[*]}" NAMES="${SERVER_NAMES[*]}" START_TICKS="$START_TICKS" END_TICKS="$END_TICKS" \
  OTHER="$(cat "$WORK/other.txt")" QUIET_WAITED="$QUIET_WAITED" LOADAVG_START="$LOADAVG_START" \
  LOADAVG_END="$LOADAVG_END" RATE="$RATE" DURATION="$DURATION" REPEATS="$REPEATS" \
  CONNECTIONS="$CONNECTIONS" NCPU="$NCPU" BENCH_PIN="$BENCH_PIN" OHA_CPUS="$OHA_CPUS" \
  SERVER_CPUS="$SERVER_CPUS" OHA_V="$("$OHA" --version)" RUSTC_V="$(rustc --version)" COMMIT="$COMMIT" \
  TCK="$TCK" python3 - "$RESULTS/meta.json" "$CONFIG" <<'EOF'
import datetime, json, os, sys
e = os.environ
names = e["NAMES"].split()
ticks = lambda s: dict(zip(names, (int(x) for x in s.split())))
start, end = ticks(e["START_TICKS"]), ticks(e["END_TICKS"])
config = {}
for folder, _, files in os.walk(sys.argv[2]):
    for name in files:
        path = os.path.join(folder, name)
        config[os.path.relpath(path, sys.argv[2])] = open(path).read()
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
    # CPU of processes other than this script's; the servers are not reaped yet when it is
    # measured, so their CPU is taken out here
    "other_cpu": [
        max(0.0, float(e["OTHER"].split()[0]) - sum((end[n] - start[n]) / int(e["TCK"]) for n in names)),
        float(e["OTHER"].split()[1]),
    ],
    # CPU seconds of each server over the whole measured part (all runs, deferred work included)
    "section_cpu_s": {n: (end[n] - start[n]) / int(e["TCK"]) for n in names},
    "measured_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    "config": config,
}, open(sys.argv[1], "w"), indent=2)
EOF
for t in "${TARGETS[@]}"; do printf '%s' "${BODIES[$t]}" >"$RESULTS/$t.body.json"; done
python3 infra/bench/inference_report.py --results "$RESULTS" --doc "$BENCH_OUT"

: "${NIMBUS_CACHE:?}" "${RESULTS:?}" "${WORK:?}"
KEEP="$NIMBUS_CACHE/bench/inference-latest"
rm -rf "$KEEP"
mkdir -p "$KEEP"
cp -r "$RESULTS"/. "$KEEP"/
cp "$WORK"/*.log "$KEEP"/ 2>/dev/null || true
log "wrote section 6 of $BENCH_OUT (raw results in $KEEP)"
