#!/usr/bin/env python3
"""Cold-start measurement under the AWS Lambda Runtime Interface Emulator (RIE).

For each function, `--runs` times: start the RIE with the function's release binary as the
bootstrap, POST one event, and record the wall time from spawning the RIE until the response has
been read, plus the "Init Duration" the RIE prints in its REPORT line. Then one strace run of
nimbus-inference with every AWS endpoint pointed at a closed local port lists every connect() the
bootstrap makes from start to its first answer.

Standard library only; writes one JSON document (see `main`) for report.py.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
import zipfile

INVOKE_PATH = "/2015-03-31/functions/function/invocations"
# The RIE logs the init phase (bootstrap exec until it first asks for work) as
# "INIT REPORT(durationMs: 2.114000)"; the "Init Duration" of its REPORT line is not that (it
# stays near 0.02 ms whatever the function does), so it is recorded but not used.
INIT_PHASE_RE = re.compile(r"INIT REPORT\(durationMs:\s*([0-9.]+)\)")
REPORT_INIT_RE = re.compile(r"Init Duration:\s*([0-9.]+)\s*ms")


# Where the platform CA bundle lives (Debian/Ubuntu, then Amazon Linux / Fedora).
CA_BUNDLES = ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"]
WHAT_IF = "nimbus-inference, CA bundle only"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nimbus_env(extra=None):
    """What the inference function needs at init; none of it is ever contacted during init."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "NIMBUS_TABLE": "nimbus-bench",
        "NIMBUS_BUCKET": "nimbus-bench",
        "NIMBUS_JOBS_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/nimbus-bench",
        "NIMBUS_CONFIG_SOURCE": "bundled",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "AKIDBENCHMARK",
        "AWS_SECRET_ACCESS_KEY": "benchmark-secret",
        "RUST_LOG": "info",
    }
    env.update(extra or {})
    return env


def hello_env():
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def wait_listening(port, deadline):
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.05):
                return True
        except OSError:
            time.sleep(0.0005)
    return False


def one_cold_start(rie, command, env, event, log_path, warm_invokes=1, timeout=30.0):
    """Start the RIE, invoke once (cold), then `warm_invokes` more times; stop it."""
    rie_port = free_port()
    api_port = free_port()
    args = [
        rie,
        "--runtime-interface-emulator-address",
        f"127.0.0.1:{rie_port}",
        "--runtime-api-address",
        f"127.0.0.1:{api_port}",
        *command,
    ]
    body = json.dumps(event).encode()
    url = f"http://127.0.0.1:{rie_port}{INVOKE_PATH}"
    with open(log_path, "wb") as log:
        start = time.monotonic()
        proc = subprocess.Popen(
            args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            if not wait_listening(rie_port, start + timeout):
                raise RuntimeError(f"RIE did not listen on {rie_port}; see {log_path}")
            listening = time.monotonic()
            request = urllib.request.Request(url, data=body, method="POST")
            with urllib.request.urlopen(request, timeout=timeout) as response:
                payload = response.read()
            first = time.monotonic()
            warm = []
            for _ in range(warm_invokes):
                t0 = time.monotonic()
                with urllib.request.urlopen(
                    urllib.request.Request(url, data=body, method="POST"), timeout=timeout
                ) as response:
                    response.read()
                warm.append((time.monotonic() - t0) * 1000.0)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    with open(log_path, "r", errors="replace") as f:
        log_text = f.read()
    try:
        status = json.loads(payload).get("statusCode")
    except (ValueError, AttributeError):
        status = None
    if status != 200:
        raise RuntimeError(f"{command[-1]} answered {payload[:300]!r}; see {log_path}")
    init_phase = [float(m) for m in INIT_PHASE_RE.findall(log_text)]
    report_init = [float(m) for m in REPORT_INIT_RE.findall(log_text)]
    return {
        "wall_ms": (first - start) * 1000.0,
        "rie_listening_ms": (listening - start) * 1000.0,
        "invoke_ms": (first - listening) * 1000.0,
        "init_phase_ms": init_phase[0] if init_phase else None,
        "report_init_duration_ms": report_init[0] if report_init else None,
        "warm_ms": warm,
        "response": payload.decode(errors="replace"),
        "runtime_api": f"127.0.0.1:{api_port}",
    }


def percentile(values, p):
    """Nearest-rank percentile (p in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def summarize(samples, key):
    values = [s[key] for s in samples if s.get(key) is not None]
    if not values:
        return None
    return {
        "n": len(values),
        "median": statistics.median(values),
        "p90": percentile(values, 90),
        "min": min(values),
        "max": max(values),
    }


def zipped_size(path):
    with tempfile.TemporaryDirectory() as tmp:
        archive = os.path.join(tmp, "bootstrap.zip")
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
            z.write(path, "bootstrap")
        return os.path.getsize(archive)


def strace_connects(rie, binary, event, workdir):
    """connect() calls of nimbus-inference (all threads) from exec to its first /health answer."""
    strace = shutil.which("strace")
    if strace is None:
        return {"available": False}
    closed = free_port()  # bound by nobody: any AWS call made during init would fail here
    trace = os.path.join(workdir, "strace-connect.txt")
    env = nimbus_env({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{closed}"})
    command = [strace, "-f", "-qq", "-e", "trace=connect", "-o", trace, binary]
    result = one_cold_start(
        rie, command, env, event, os.path.join(workdir, "rie-strace.log"), warm_invokes=0
    )
    with open(trace, "r", errors="replace") as f:
        lines = [line.rstrip("\n") for line in f if "connect(" in line]
    destinations = []
    for line in lines:
        m = re.search(r'sin_port=htons\((\d+)\).*?inet_addr\("([^"]+)"\)', line)
        if m:
            destinations.append(f"{m.group(2)}:{m.group(1)}")
            continue
        m = re.search(r'sun_path="([^"]+)"', line)
        destinations.append(f"unix:{m.group(1)}" if m else line.split("connect(", 1)[1][:80])
    return {
        "available": True,
        "aws_endpoint_url": f"http://127.0.0.1:{closed}",
        "response": result["response"],
        "runtime_api": result["runtime_api"],
        "connects": destinations,
        "other_connects": [d for d in destinations if d != result["runtime_api"]],
        "closed_port_contacted": any(d.endswith(f":{closed}") for d in destinations),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rie", required=True)
    parser.add_argument("--nimbus", required=True, help="nimbus-inference release binary")
    parser.add_argument("--hello", required=True, help="nimbus-hello-lambda release binary")
    parser.add_argument("--event", required=True, help="API Gateway HTTP API v2 GET /health event")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    with open(args.event) as f:
        health_event = json.load(f)
    os.makedirs(args.workdir, exist_ok=True)
    functions = {
        "nimbus-inference": (args.nimbus, nimbus_env(), health_event),
        "hello-world": (args.hello, hello_env(), {"hello": "world"}),
    }
    # What-if: the SDK's TLS client loads the platform's CA certificates at init, both the bundle
    # file and every file of the certificate directory. Pointing it at the bundle alone shows what
    # that directory scan costs.
    bundle = next((b for b in CA_BUNDLES if os.path.exists(b)), None)
    if bundle:
        empty_dir = os.path.join(args.workdir, "empty-cert-dir")
        os.makedirs(empty_dir, exist_ok=True)
        functions[WHAT_IF] = (
            args.nimbus,
            nimbus_env({"SSL_CERT_FILE": bundle, "SSL_CERT_DIR": empty_dir}),
            health_event,
        )
    # Warm the page cache once each so run 1 is not the only one reading from disk.
    for name, (binary, env, event) in functions.items():
        one_cold_start(args.rie, [binary], env, event, os.path.join(args.workdir, f"rie-{name}-warmup.log"))

    samples = {name: [] for name in functions}
    # Interleave the two functions so drift on the machine hits both equally.
    for run in range(args.runs):
        for name, (binary, env, event) in functions.items():
            log = os.path.join(args.workdir, f"rie-{name}-{run}.log")
            samples[name].append(one_cold_start(args.rie, [binary], env, event, log))

    result = {"runs": args.runs, "ca_bundle": bundle, "functions": {}}
    for name, (binary, env, _) in functions.items():
        s = samples[name]
        warm = [w for sample in s for w in sample["warm_ms"]]
        result["functions"][name] = {
            "binary": binary,
            "extra_env": {k: v for k, v in env.items() if k.startswith("SSL_")},
            "size_bytes": os.path.getsize(binary),
            "zip_bytes": zipped_size(binary),
            "wall_ms": summarize(s, "wall_ms"),
            "rie_listening_ms": summarize(s, "rie_listening_ms"),
            "invoke_ms": summarize(s, "invoke_ms"),
            "init_phase_ms": summarize(s, "init_phase_ms"),
            "report_init_duration_ms": summarize(s, "report_init_duration_ms"),
            "warm_ms": summarize([{"v": w} for w in warm], "v"),
            "samples_wall_ms": [round(x["wall_ms"], 2) for x in s],
            "samples_init_phase_ms": [x["init_phase_ms"] for x in s],
            "example_response": s[0]["response"][:400],
        }
    result["no_network_at_init"] = strace_connects(
        args.rie, args.nimbus, health_event, args.workdir
    )
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
