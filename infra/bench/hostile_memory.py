#!/usr/bin/env python3
"""The local server's memory across repeated hostile runs.

Starts `nimbus serve` (a fresh data directory, open on loopback), then runs the same hostile suite
several times: oversized JSON fields and bodies up to the 10 MB limit, deep and wide JSON, huge
multipart text fields, a 205 MB upload over the batch limit, malformed multipart, invalid UTF-8
path ids, repeated query parameters, unknown routes and methods, bad keys, and many concurrent
connections. After each run (and a short settle) it reads the server's resident memory (VmRSS)
and its peak (VmHWM) from /proc and prints one JSON line per run; `--markdown` prints a table, and
`--doc docs/benchmarks.md` writes (or replaces) its section there. What held the memory before, and
what bounds it now: "Memory under hostile load" in infra/bench/notes.md.

    python infra/bench/hostile_memory.py --nimbus ~/.cache/nimbus/target/release/nimbus --runs 5
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

MIB = 1024 * 1024
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


class Target:
    def __init__(self, port: int) -> None:
        self.port = port

    def request(
        self, method: str, path: str, body: bytes | Iterator[bytes] | None = None, headers: dict[str, str] | None = None
    ) -> int:
        """One request on a fresh connection; the status, or 0 when the server dropped it."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            response.read()
            return response.status
        except (ConnectionError, http.client.HTTPException, OSError):
            return 0
        finally:
            connection.close()

    def json(self, path: str, value: object) -> int:
        return self.request("POST", path, json.dumps(value).encode(), {"Content-Type": "application/json"})


def multipart(fields: list[tuple[str, str | None, bytes]], boundary: str = "hostileboundary") -> bytes:
    parts = []
    for name, filename, data in fields:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        parts.append(f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + data + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode()


def streamed_zeros(total: int, chunk: int = MIB) -> Iterator[bytes]:
    block = b"0" * chunk
    sent = 0
    while sent < total:
        size = min(chunk, total - sent)
        yield block[:size]
        sent += size


def hostile_cases(target: Target) -> list[tuple[str, Callable[[], int]]]:
    big = "m" * MIB
    messages = [{"role": "user", "content": "x"}]
    mp_headers = {"Content-Type": "multipart/form-data; boundary=hostileboundary"}
    upload_prefix = b'--hostileboundary\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
    upload_prefix += b'--hostileboundary\r\nContent-Disposition: form-data; name="file"; filename="x.jsonl"\r\n\r\n'

    def oversized_upload() -> int:
        size = 205 * MIB
        body = iter([upload_prefix, *streamed_zeros(size), b"\r\n--hostileboundary--\r\n"])
        headers = dict(mp_headers)
        headers["Content-Length"] = str(len(upload_prefix) + size + len(b"\r\n--hostileboundary--\r\n"))
        return target.request("POST", "/v1/files", body, headers)

    cases: list[tuple[str, Callable[[], int]]] = [
        ("1 MB model", lambda: target.json("/v1/chat/completions", {"model": big, "messages": messages})),
        (
            "1 MB tool_choice name",
            lambda: target.json(
                "/v1/chat/completions",
                {"model": "dummy", "messages": messages, "tool_choice": {"type": "function", "function": {"name": big}}},
            ),
        ),
        ("9 MB content", lambda: target.json("/v1/chat/completions", {"model": "dummy", "messages": [{"role": "user", "content": "w " * (9 * MIB // 2)}]})),
        (
            "wide messages (200k)",
            lambda: target.json("/v1/chat/completions", {"model": "dummy", "messages": messages * 200_000}),
        ),
        ("deep JSON", lambda: target.request("POST", "/v1/chat/completions", b"[" * 100_000, {"Content-Type": "application/json"})),
        ("11 MB body", lambda: target.request("POST", "/v1/chat/completions", b"{" + b" " * (11 * MIB), {"Content-Type": "application/json"})),
        ("1 MB completion_window", lambda: target.json("/v1/batches", {"input_file_id": "file-x", "endpoint": "/v1/chat/completions", "completion_window": big})),
        ("1 MB endpoint", lambda: target.json("/v1/batches", {"input_file_id": "file-x", "endpoint": big, "completion_window": "24h"})),
        ("1 MB input_file_id", lambda: target.json("/v1/batches", {"input_file_id": big, "endpoint": "/v1/chat/completions", "completion_window": "24h"})),
        (
            "1 MB metadata key",
            lambda: target.json("/v1/batches", {"input_file_id": "file-x", "endpoint": "/v1/chat/completions", "completion_window": "24h", "metadata": {big: "v"}}),
        ),
        ("7 MB multipart purpose", lambda: target.request("POST", "/v1/files", multipart([("purpose", None, b"p" * 7 * MIB), ("file", "x.jsonl", b"{}\n")]), mp_headers)),
        ("malformed multipart", lambda: target.request("POST", "/v1/files", b"--hostileboundary\r\nnope", mp_headers)),
        ("205 MB batch upload", oversized_upload),
        ("invalid UTF-8 file id", lambda: target.request("GET", "/v1/files/%FF%FE%FD")),
        ("invalid UTF-8 batch id", lambda: target.request("GET", "/v1/batches/%FF%FE%FD")),
        ("repeated query", lambda: target.request("GET", "/v1/files?limit=1&limit=2")),
        ("unknown route", lambda: target.request("POST", "/v1/nothing", b"x" * MIB)),
        ("wrong method", lambda: target.request("DELETE", "/v1/chat/completions", b"x" * MIB)),
        ("bad key", lambda: target.request("GET", "/v1/models", headers={"Authorization": "Bearer nmb_bad_key"})),
        ("poisoned Host", lambda: target.json("/v1/direct_uploads", {"filename": "x.jsonl", "purpose": "batch", "bytes": 10})),
    ]
    return cases


def run_suite(target: Target, parallel: int) -> dict[str, int]:
    """Every case once, then the JSON-heavy ones `parallel` at a time; statuses by case."""
    statuses: dict[str, int] = {}
    cases = hostile_cases(target)
    for name, case in cases:
        statuses[name] = case()
    heavy = [case for name, case in cases if "MB" in name and "205" not in name]
    with concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as pool:
        for _ in range(3):
            list(pool.map(lambda case: case(), heavy))
    return statuses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nimbus", type=Path, required=True, help="the nimbus binary")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--parallel", type=int, default=8, help="concurrent heavy requests")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds to wait after a run before reading memory")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--env", action="append", default=[], help="extra KEY=VALUE for the server")
    parser.add_argument("--doc", type=Path, help="write the results as a section of this markdown file")
    args = parser.parse_args()

    port = free_port()
    with tempfile.TemporaryDirectory() as data_dir:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NIMBUS_")}
        env.update({"PORT": str(port), "NIMBUS_DATA_DIR": data_dir, "NIMBUS_CONFIG": str(REPO / "infra/config/nimbus.toml"), "RUST_LOG": "warn"})
        env.update(dict(item.split("=", 1) for item in args.env))
        server = subprocess.Popen([str(args.nimbus), "serve"], env=env, cwd=REPO, stderr=subprocess.DEVNULL)
        try:
            target = Target(port)
            deadline = time.monotonic() + 60
            while target.request("GET", "/health") != 200:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the server did not start")
                time.sleep(0.2)
            time.sleep(1)
            rows = [{"run": 0, "rss_mib": proc_kib(server.pid, "VmRSS") / 1024, "hwm_mib": proc_kib(server.pid, "VmHWM") / 1024}]
            print(json.dumps(rows[-1]), flush=True)
            for run in range(1, args.runs + 1):
                statuses = run_suite(target, args.parallel)
                time.sleep(args.settle)
                rows.append(
                    {
                        "run": run,
                        "rss_mib": proc_kib(server.pid, "VmRSS") / 1024,
                        "hwm_mib": proc_kib(server.pid, "VmHWM") / 1024,
                        "server_errors": sorted(name for name, status in statuses.items() if status >= 500 or status == 0),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
            if server.poll() is not None:
                raise RuntimeError("the server died during the hostile runs")
        finally:
            server.terminate()
            server.wait(timeout=30)
    table = "| after run | RSS (MiB) | peak RSS (MiB) | 5xx or dropped |\n|---:|---:|---:|---|\n" + "".join(
        f"| {row['run']} | {row['rss_mib']:.1f} | {row['hwm_mib']:.1f} | {', '.join(row.get('server_errors', [])) or 'none'} |\n"
        for row in rows
    )
    if args.markdown:
        print(table)
    if args.doc:
        write_section(args.doc, args, table)
    return 0


BEGIN = "<!-- BEGIN hostile memory: generated by infra/bench/hostile_memory.py; rerun it, do not edit -->"
END = "<!-- END hostile memory -->"


def write_section(doc: Path, args: argparse.Namespace, table: str) -> None:
    measured = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    section = (
        f"{BEGIN}\n## 5. Memory under hostile load\n\n"
        f"_Measured {measured} with `{args.nimbus.name}` ({args.nimbus}), {os.cpu_count()} CPUs._\n\n"
        f"The hostile suite of `infra/bench/hostile_memory.py` ({len(hostile_cases(Target(0)))} kinds of request: oversized "
        "fields and bodies, a 205 MB upload over the limit, malformed multipart, invalid UTF-8 ids, repeated "
        f"query parameters, bad keys…) run {args.runs} times against one `nimbus serve`, with {args.parallel} "
        f"heavy requests in flight at once; RSS read {args.settle:g} s after each run. Target: no 5xx, no dropped "
        "connection, and memory that returns to its resting level instead of growing from run to run. Why it "
        "grew before and what bounds it: *Memory under hostile load* in the investigation notes above.\n\n"
        f"{table}\n"
        f"Reproduce: `python infra/bench/hostile_memory.py --nimbus PATH --runs {args.runs} --doc docs/benchmarks.md`.\n{END}\n"
    )
    text = doc.read_text() if doc.exists() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + rest.split(END, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    doc.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
