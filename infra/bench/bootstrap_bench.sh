#!/usr/bin/env bash
# `make bench-bootstrap`: the time a new user waits from `make run` to the first answered request,
# on this machine, with an empty cargo cache (crates downloaded again) and an empty target
# directory, as on a fresh clone. Prints the seconds and cargo's own figures.
#
# Knobs: BOOTSTRAP_PORT (default 3999), BOOTSTRAP_DIR (scratch, default a new temporary directory;
# removed at the end unless BOOTSTRAP_KEEP=1).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PORT="${BOOTSTRAP_PORT:-3999}"
SCRATCH="${BOOTSTRAP_DIR:-$(mktemp -d /tmp/nimbus-bootstrap.XXXXXX)}"
mkdir -p "$SCRATCH/cargo-home"
export CARGO_HOME="$SCRATCH/cargo-home" CARGO_TARGET_DIR="$SCRATCH/target"
# rustup's proxies stay reachable (RUSTUP_HOME is untouched).
export PATH="$HOME/.cargo/bin:$PATH"

server=""
cleanup() {
  [[ -n "$server" ]] && kill -- "-$server" 2>/dev/null || true
  [[ "${BOOTSTRAP_KEEP:-0}" == 1 ]] || rm -rf "$SCRATCH"
}
trap cleanup EXIT

cd "$ROOT"
start=$(date +%s.%N)
setsid make --no-print-directory run PORT="$PORT" >"$SCRATCH/run.log" 2>&1 &
server=$!
until curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null 2>&1; do
  if ! kill -0 "$server" 2>/dev/null; then
    echo "make run exited before answering:" >&2
    tail -20 "$SCRATCH/run.log" >&2
    exit 1
  fi
  sleep 0.5
done
end=$(date +%s.%N)
printf 'first answer %.0f s after `make run` (empty cargo cache and target directory, %s cores)\n' \
  "$(echo "$end - $start" | bc)" "$(nproc)"
grep -E "Finished|Downloaded [0-9]+ crates" "$SCRATCH/run.log" || true
