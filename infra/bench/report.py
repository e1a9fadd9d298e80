#!/usr/bin/env python3
"""Turn the raw results of run-benchmarks.sh (oha JSON, CPU samples, coldstart.json, meta.json)
into docs/benchmarks.md. Every number in the document comes from those files; hand-written
investigation notes, if any, come from infra/bench/notes.md and are included verbatim."""

import argparse
import datetime
import json
import os
import platform
import re
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))

# Targets of the foundation issue.
COLD_START_MAX_RATIO = 1.5
BINARY_MAX_BYTES = 10 * 1000 * 1000  # 10 MB, decimal as AWS counts package sizes
# Share of one core used by other processes above which a run is flagged as disturbed.
DISTURBED_SHARE = 0.10

TARGET_LABELS = {
    "baseline": "mock directly (baseline)",
    "gateway": "through the gateway",
    "gateway-warn": "through the gateway, `RUST_LOG=warn`",
}
PERCENTILES = ["p50", "p90", "p99", "p99.9"]


def load(results, name):
    with open(os.path.join(results, name)) as f:
        return json.load(f)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def mem_gib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return None


def sam_version(rie):
    init = os.path.join(os.path.dirname(rie), "..", "..", "__init__.py")
    try:
        with open(init) as f:
            m = re.search(r'__version__\s*=\s*"([^"]+)"', f.read())
            return m.group(1) if m else "unknown"
    except OSError:
        return "unknown"


def release_profile():
    """`[profile.release]` of the workspace, as `key = value` pairs."""
    try:
        import tomllib

        with open(os.path.join(HERE, "..", "..", "Cargo.toml"), "rb") as f:
            profile = tomllib.load(f).get("profile", {}).get("release", {})
    except (ImportError, OSError, ValueError):
        return "see Cargo.toml"
    return ", ".join(f"`{k} = {json.dumps(v)}`" for k, v in profile.items()) or "defaults"


def ms(value, digits=3):
    return "–" if value is None else f"{value:.{digits}f}"


def verdict(ok):
    return "**met**" if ok else "**missed**"


class Run:
    """One oha run (its JSON) plus the CPU the servers used during it."""

    def __init__(self, results, name):
        doc = load(results, f"{name}.json")
        cpu_path = os.path.join(results, f"{name}.cpu.json")
        self.cpu = load(results, f"{name}.cpu.json") if os.path.exists(cpu_path) else {}
        self.rps = doc["metrics"]["requests_per_sec"]
        self.p = {k: v * 1000.0 for k, v in doc["latencyPercentiles"].items() if v is not None}
        self.max = doc["metrics"]["latency_ms"]["max"]
        codes = doc.get("statusCodeDistribution", {})
        self.ok = codes.get("200", 0)
        self.total = sum(codes.values())
        self.errors = {
            k: v
            for k, v in doc.get("errorDistribution", {}).items()
            if k != "aborted due to deadline"
        }

    @property
    def clean(self):
        return self.ok == self.total and not self.errors

    def cpu_us_per_request(self, server):
        seconds = self.cpu.get(server)
        if seconds is None or not self.ok:
            return None
        return seconds / self.ok * 1e6


class Repeated:
    """The repetitions of one fixed-rate target; statistics are medians over the runs."""

    def __init__(self, runs):
        self.runs = runs
        self.rps = statistics.median(r.rps for r in runs)
        self.p = {k: statistics.median(r.p[k] for r in runs) for k in PERCENTILES}
        self.max = max(r.max for r in runs)
        self.ok = sum(r.ok for r in runs)
        self.total = sum(r.total for r in runs)
        self.clean = all(r.clean for r in runs)

    def cpu(self, server):
        values = [r.cpu_us_per_request(server) for r in self.runs]
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    R = args.results

    meta = load(R, "meta.json")
    cold = load(R, "coldstart.json")
    targets = [t for t in TARGET_LABELS if os.path.exists(os.path.join(R, f"{t}-rate-1.json"))]
    rate = {
        t: Repeated([Run(R, f"{t}-rate-{i}") for i in range(1, meta["repeats"] + 1)]) for t in targets
    }
    maxes = {c: {t: Run(R, f"{t}-max-c{c}") for t in targets} for c in meta["max_connections"]}
    base, gw = rate["baseline"], rate["gateway"]
    gw_warn = rate.get("gateway-warn")

    nimbus = cold["functions"]["nimbus-inference"]
    hello = cold["functions"]["hello-world"]
    wall_ratio = nimbus["wall_ms"]["median"] / hello["wall_ms"]["median"]
    invoke_ratio = nimbus["invoke_ms"]["median"] / hello["invoke_ms"]["median"]
    net = cold["no_network_at_init"]
    net_answer_ok = False
    if net.get("available"):
        try:
            net_answer_ok = json.loads(net["response"]).get("statusCode") == 200
        except ValueError:
            net_answer_ok = False
    net_ok = bool(net.get("available")) and not net["other_connects"] and net_answer_ok

    p50_over = gw.p["p50"] - base.p["p50"]
    p99_over = gw.p["p99"] - base.p["p99"]
    best = {t: max(maxes[c][t].rps for c in maxes) for t in targets}

    now = meta.get("measured_at") or datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC"
    )
    mem = mem_gib()
    L = []
    w = L.append

    w("# Nimbus benchmarks")
    w("")
    w(
        f"_Generated by `make bench` (`infra/bench/run-benchmarks.sh`), measured {now}. Do not edit the "
        "numbers by hand: rerun the benchmark. The investigation notes come from "
        "`infra/bench/notes.md`._"
    )
    w("")
    w("## Summary")
    w("")
    w("| Target | Measured | Result |")
    w("|---|---|---|")
    w(
        f"| Cold start of `nimbus-inference` ≤ {COLD_START_MAX_RATIO}× a hello-world "
        "`lambda_runtime` function (median wall time, RIE start → first answer) | "
        f"{nimbus['wall_ms']['median']:.1f} ms vs {hello['wall_ms']['median']:.1f} ms = "
        f"**{wall_ratio:.2f}×** (POST → answer alone: {invoke_ratio:.2f}×) | "
        f"{verdict(wall_ratio <= COLD_START_MAX_RATIO)} |"
    )
    zip_note = ""
    if nimbus["size_bytes"] > BINARY_MAX_BYTES:
        zip_note = " (the zipped deployment package is {} 10 MB)".format(
            "under" if nimbus["zip_bytes"] <= BINARY_MAX_BYTES else "over"
        )
    w(
        f"| Stripped `bootstrap` ≤ 10 MB | {nimbus['size_bytes'] / 1e6:.2f} MB "
        f"({nimbus['zip_bytes'] / 1e6:.2f} MB zipped) | "
        f"{verdict(nimbus['size_bytes'] <= BINARY_MAX_BYTES)}{zip_note} |"
    )
    if net.get("available"):
        net_text = (
            "no connect() but to the Lambda runtime API; `/health` answered 200 with every AWS "
            "endpoint pointed at a closed port"
            if net_ok
            else "see section 2"
        )
        w(f"| No AWS network call during init | {net_text} | {verdict(net_ok)} |")
    else:
        w("| No AWS network call during init | strace not installed | not checked |")
    w(
        f"| Gateway overhead at {meta['rate']:,} req/s (reported) | p50 +{p50_over:.3f} ms, "
        f"p99 +{p99_over:.3f} ms | – |"
    )
    w(
        f"| Max throughput through the gateway (reported) | {best['gateway']:,.0f} req/s "
        f"(mock alone: {best['baseline']:,.0f} req/s) | – |"
    )
    w("")

    disturbed = [
        section
        for section, (other, wall) in meta.get("other_cpu", {}).items()
        if wall > 0 and other / wall > DISTURBED_SHARE
    ]
    if disturbed:
        w(
            f"**Caution:** other processes used more than {DISTURBED_SHARE:.0%} of a core during "
            f"{' and '.join(disturbed)} measurements (see *Other load* below); those numbers are "
            "pessimistic. Rerun on an idle machine."
        )
        w("")

    w("## Machine and versions")
    w("")
    w(
        f"- CPU: {cpu_model()}, `nproc` = {meta['nproc']}"
        + (f", {mem:.0f} GiB RAM" if mem else "")
        + " (a VM: expect some run-to-run noise, most of it in the tail percentiles)"
    )
    w(f"- Kernel: {platform.system()} {platform.release()}")
    w(f"- Toolchain: {meta['rustc']}; the workspace release profile ({release_profile()})")
    w(f"- Load generator: {meta['oha']} (crates.io, `cargo install --locked`)")
    w(
        "- Lambda Runtime Interface Emulator: `aws-lambda-rie-x86_64` shipped in aws-sam-cli "
        f"{sam_version(meta['rie'])}"
    )
    w(f"- Source: commit `{meta['commit']}`")
    if meta.get("other_cpu"):
        parts = []
        for section, label in (("gateway", "section 1"), ("coldstart", "section 2")):
            other, wall = meta["other_cpu"][section]
            parts.append(f"{label}: {other:.1f} CPU s over {wall:.0f} s ({other / wall:.0%} of one core)")
        w(
            "- Other load: CPU time used on the machine by processes other than the benchmark's own "
            f"(oha, servers, RIE) while it measured: {'; '.join(parts)}. Load average at the start "
            f"{meta['loadavg_start']}, at the end {meta['loadavg_end']}. The script first waited "
            f"{meta.get('quiet_waited_s', 0)} s for an idle machine."
        )
    w("")

    w("## 1. Gateway overhead")
    w("")
    w("### Method")
    w("")
    w(
        "- Upstream: `nimbus-mock-openai` (`infra/bench/src/mock_openai.rs`), an axum server that "
        "reads the request and answers a fixed 286-byte `chat.completion` at once (`TCP_NODELAY`, "
        "multi-threaded tokio)."
    )
    w(
        "- Gateway: `nimbus serve` (release build), config with one model `bench` routed to the mock "
        "by the `openai` provider, `max_retries = 0`, no API keys (open on loopback), fresh data "
        "directory. Two gateways run side by side: one with the default `RUST_LOG=info`, one with "
        "`RUST_LOG=warn` (no per-request tracing span), to isolate what tracing costs."
    )
    w(
        f"- Request: `POST /v1/chat/completions`, non-streaming, body `{meta['body']}`; the same "
        "body goes to the mock directly for the baseline."
    )
    if meta["pin"]:
        w(
            f"- CPU placement (`taskset`): oha on CPU {meta['oha_cpus']} with one worker thread; "
            f"the mock and the gateways on CPU {meta['server_cpus']}. The baseline has the same "
            "placement, so the servers get the same CPU budget in both cases, and the load "
            "generator never takes cycles from what it measures. (Other placements were tried, see "
            "the notes; on 2 cores none is clean.)"
        )
    else:
        w("- No CPU pinning: oha, mock and gateways share every CPU.")
    w(
        f"- Fixed rate: `oha -q {meta['rate']} -z {meta['duration']} -c {meta['connections']} "
        "--latency-correction` (latency counted from when each request was due, so a stall counts "
        f"for every request it delays). {meta['repeats']} runs per target, the targets interleaved "
        "(baseline, gateway, gateway-warn, baseline, …); the tables show the median of the runs "
        "for each percentile. Each target got a 2 s warm-up first."
    )
    w(
        f"- Max throughput: unlimited rate, `-z {meta['max_duration']}`, `-c` ∈ "
        f"{{{', '.join(str(c) for c in meta['max_connections'])}}}, keep-alive, one run each."
    )
    w(
        "- CPU per request: user + system CPU time of the server process (from `/proc/PID/stat`) "
        "during the run, divided by the requests answered."
    )
    w("- Latencies are oha's, client-side, in milliseconds, loopback round trips included.")
    w("")
    w(
        f"### Fixed rate: {meta['rate']:,} req/s, {meta['duration']} × {meta['repeats']} runs, "
        f"{meta['connections']} connections"
    )
    w("")
    w(
        "| Target | req/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | p50 / p99 of each run | "
        "Gateway CPU µs/req | Mock CPU µs/req |"
    )
    w("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for t in targets:
        r = rate[t]
        per_run = "; ".join(f"{x.p['p50']:.3f} / {x.p['p99']:.3f}" for x in r.runs)
        server = None if t == "baseline" else t
        w(
            f"| {TARGET_LABELS[t]} | {r.rps:,.0f} | {ms(r.p['p50'])} | {ms(r.p['p90'])} | "
            f"{ms(r.p['p99'])} | {ms(r.p['p99.9'])} | {ms(r.max)} | {per_run} | "
            f"{ms(r.cpu(server) if server else None, 1)} | {ms(r.cpu('mock'), 1)} |"
        )
    w("")
    w(
        f"**Gateway overhead** (gateway − baseline, medians): p50 **+{p50_over:.3f} ms**, p90 "
        f"+{gw.p['p90'] - base.p['p90']:.3f} ms, p99 **+{p99_over:.3f} ms**."
    )
    if gw_warn:
        w(
            f"With `RUST_LOG=warn`: p50 +{gw_warn.p['p50'] - base.p['p50']:.3f} ms, p99 "
            f"+{gw_warn.p['p99'] - base.p['p99']:.3f} ms; CPU per request "
            f"{ms(gw_warn.cpu('gateway-warn'), 1)} µs against {ms(gw.cpu('gateway'), 1)} µs with "
            "`info`."
        )
    w("")
    w("### Max throughput (unlimited rate, one run each)")
    w("")
    header = "| Connections |" + "".join(f" {TARGET_LABELS[t]} req/s (p50 / p99 ms) |" for t in targets)
    w(header + " Gateway / mock |")
    w("|---:|" + "---:|" * len(targets) + "---:|")
    for c, runs in maxes.items():
        cells = "".join(
            f" {runs[t].rps:,.0f} ({runs[t].p['p50']:.3f} / {runs[t].p['p99']:.3f}) |" for t in targets
        )
        w(f"| {c} |{cells} {runs['gateway'].rps / runs['baseline'].rps:.0%} |")
    w("")
    all_runs = [x for r in rate.values() for x in r.runs] + [x for m in maxes.values() for x in m.values()]
    if all(x.clean for x in all_runs):
        w(
            "Every response in every run was a 200. (Requests still in flight when a timed run ends "
            "are aborted by oha and not counted.)"
        )
    else:
        w("**Some runs had non-200 answers or errors**; see the raw JSON.")
    w("")

    w("## 2. Cold start")
    w("")
    w("### Method")
    w("")
    w(
        "- Release builds with the workspace profile, each run as the `bootstrap` the way "
        "`provided.al2023` runs it: `nimbus-inference`, and `nimbus-hello-lambda` "
        "(`infra/bench/src/hello_lambda.rs`: `lambda_runtime::run(service_fn(..))` returning a small "
        "JSON)."
    )
    w(
        "- `nimbus-inference` gets its Lambda environment: `NIMBUS_TABLE`, `NIMBUS_BUCKET`, "
        "`NIMBUS_JOBS_QUEUE_URL`, `NIMBUS_CONFIG_SOURCE=bundled`, `AWS_REGION=us-east-1`, dummy static "
        "credentials. It is invoked with the API Gateway HTTP API v2 event "
        "`infra/events/inference-health.json` (`GET /health`); hello world with `{\"hello\":\"world\"}`."
    )
    w(
        "- One cold start: spawn the RIE with the binary, wait for its port, POST the event to "
        "`/2015-03-31/functions/function/invocations`, read the answer (it must have `statusCode` "
        "200), stop the RIE. The RIE starts the runtime on the first invoke, so each measurement "
        f"covers exec, init and the first invocation. {cold['runs']} cold starts per function, the "
        "functions interleaved, after one untimed start of each to warm the page cache."
    )
    w(
        "- Columns: **wall** = RIE spawn → answer read (the metric of the target; it includes the "
        "RIE's own start-up, the same for every function); **POST → answer** = without the RIE "
        "start-up (exec + init + first invocation); **init phase** = the RIE's "
        "`INIT REPORT(durationMs)`, bootstrap exec → its first `GET /next`. The `Init Duration` in "
        "the RIE's REPORT line stays around 0.02 ms whatever the function does, so it is not used."
    )
    if cold.get("ca_bundle"):
        w(
            "- The row *nimbus-inference, CA bundle only* is a what-if, not part of the target: the "
            f"same binary with `SSL_CERT_FILE={cold['ca_bundle']}` and `SSL_CERT_DIR` pointing at an "
            "empty directory, so the AWS SDK's TLS client loads the CA bundle once instead of the "
            "bundle plus every file of `/etc/ssl/certs` (see the notes)."
        )
    w("")
    w("### Bootstrap size")
    w("")
    w("| Function | Stripped binary | Zipped (deflate -9, as in the deployment package) |")
    w("|---|---:|---:|")
    seen = set()
    for name, f in cold["functions"].items():
        if f["binary"] in seen:
            continue
        seen.add(f["binary"])
        w(
            f"| {name} | {f['size_bytes']:,} B ({f['size_bytes'] / 1e6:.2f} MB) | "
            f"{f['zip_bytes']:,} B ({f['zip_bytes'] / 1e6:.2f} MB) |"
        )
    w("")
    w(f"### Time to first answer ({cold['runs']} cold starts each, milliseconds)")
    w("")
    w(
        "| Function | Wall median | Wall p90 | POST → answer median | POST → answer p90 | "
        "Init phase median | Init phase p90 | Warm invoke median |"
    )
    w("|---|---:|---:|---:|---:|---:|---:|---:|")

    def g(f, key, stat):
        return (f.get(key) or {}).get(stat)

    for name, f in cold["functions"].items():
        w(
            f"| {name} | {ms(g(f, 'wall_ms', 'median'), 1)} | {ms(g(f, 'wall_ms', 'p90'), 1)} | "
            f"{ms(g(f, 'invoke_ms', 'median'), 1)} | {ms(g(f, 'invoke_ms', 'p90'), 1)} | "
            f"{ms(g(f, 'init_phase_ms', 'median'), 2)} | {ms(g(f, 'init_phase_ms', 'p90'), 2)} | "
            f"{ms(g(f, 'warm_ms', 'median'), 2)} |"
        )

    def ratio(key, stat):
        a, b = g(nimbus, key, stat), g(hello, key, stat)
        return f"{a / b:.2f}×" if a and b else "–"

    w(
        f"| **nimbus-inference / hello-world** | **{ratio('wall_ms', 'median')}** | "
        f"{ratio('wall_ms', 'p90')} | {ratio('invoke_ms', 'median')} | {ratio('invoke_ms', 'p90')} | "
        f"{ratio('init_phase_ms', 'median')} | {ratio('init_phase_ms', 'p90')} | – |"
    )
    w("")
    w(
        "Every sample, wall ms: "
        + "; ".join(
            f"{name}: {', '.join(f'{x:.1f}' for x in f['samples_wall_ms'])}"
            for name, f in cold["functions"].items()
        )
        + "."
    )
    w("")
    w("### No AWS network call during init")
    w("")
    if net.get("available"):
        connects = ", ".join(f"`{d}`" for d in net["connects"]) or "none"
        others = (
            "Nothing else was contacted"
            if not net["other_connects"]
            else "**Other destinations: " + ", ".join(net["other_connects"]) + "**"
        )
        w(
            "`nimbus-inference` ran once more under `strace -f -e trace=connect` inside the RIE, "
            f"with `AWS_ENDPOINT_URL={net['aws_endpoint_url']}` (a port nobody listens on), so any "
            "SDK call would have had to connect there and fail. From exec to the answer of the first "
            f"`GET /health` its connect() calls were: {connects} (the Lambda runtime API is "
            f"`{net['runtime_api']}`). {others}. The answer: `{net['response'][:140]}…`"
        )
    else:
        w("strace is not installed, so this was not checked.")
    w("")

    notes = os.path.join(HERE, "notes.md")
    if os.path.exists(notes):
        with open(notes) as f:
            text = f.read().strip()
        if text:
            w(text)
            w("")

    w("## Reproduce")
    w("")
    w("```sh")
    w("make test-deps   # once: the venv whose SAM CLI ships the RIE")
    w("make bench       # = bash infra/bench/run-benchmarks.sh")
    w("```")
    w("")
    w(
        "The script builds `nimbus-local`, `nimbus-inference`, `nimbus-bench` (and, for the batch "
        "benchmarks, the files, batches, worker and poller functions) in release mode, "
        f"installs {meta['oha']} into `~/.cache/nimbus/tools` if it is missing, runs everything "
        "above (about 5 minutes after the build, plus about 5 for the batch benchmarks of section 4) "
        "and rewrites this file; the raw JSON stays in "
        "`~/.cache/nimbus/bench/latest/`. Knobs (environment): `BENCH_RATE`, `BENCH_DURATION`, "
        "`BENCH_REPEATS`, `BENCH_CONNECTIONS`, `BENCH_MAX_DURATION`, `BENCH_MAX_CONNECTIONS`, "
        "`BENCH_PIN`, `BENCH_COLD_RUNS`, `BENCH_QUIET_WAIT`, `BENCH_SKIP_BUILD=1`, "
        "`BENCH_SKIP_BATCHES=1` (keeps section 4 as it is), `RIE=/path/to/aws-lambda-rie-x86_64`, "
        "`BENCH_OUT` (see the script's header). Re-render the markdown from kept results with "
        "`python3 infra/bench/report.py --results ~/.cache/nimbus/bench/latest --out docs/benchmarks.md`."
    )
    w("")
    with open(args.out, "w") as f:
        f.write("\n".join(L))


if __name__ == "__main__":
    main()
