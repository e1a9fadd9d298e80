"""Part `local`: a 50,000-line batch on a release `nimbus serve`, against the ideal
lines × latency ÷ (workers × line_concurrency)."""

from __future__ import annotations

import math
import os
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

from .common import (
    BATCH_WORKERS,
    LINE_CONCURRENCY,
    LINES,
    LINES_PER_CHUNK,
    MODEL,
    MODEL_LATENCY_S,
    MachineLoad,
    SkipPart,
    count_lines,
    cpu_seconds,
    engine_floor_s,
    log,
    proc_kb,
    write_bench_config,
    write_input,
)


def provider_latency_ms(api_base: str, samples: int = 40) -> dict[str, float]:
    """What `dummy-20ms` really takes: pairs of sequential chat completions on one kept-alive
    connection, one with `dummy` (0 ms) and one with `dummy-20ms`; the median difference."""
    import nimbus_testkit as kit
    import requests

    session = requests.Session()

    def once(model: str, i: int) -> float:
        body = {"model": model, "messages": kit.user(f"calibrate {i}"), "max_tokens": 16}
        start = time.perf_counter()
        session.post(f"{api_base}/chat/completions", json=body, timeout=10).raise_for_status()
        return (time.perf_counter() - start) * 1000

    for i in range(5):  # warm-up
        once("dummy", i)
    pairs = [(once("dummy", i), once(MODEL, i)) for i in range(samples)]
    return {
        "dummy_ms": statistics.median(a for a, _ in pairs),
        "slow_ms": statistics.median(b for _, b in pairs),
        "latency_ms": statistics.median(b - a for a, b in pairs),
        "samples": samples,
    }


def start_server(kit: Any, scratch: Path, config: Path, name: str) -> Any:
    """A release `nimbus serve` with a fresh data directory, the poller every second and
    `BATCH_WORKERS` queue workers."""
    return kit.NimbusServer(
        scratch / f"data-{name}",
        scratch / "logs",
        config=config,
        name=name,
        extra_env={
            "RUST_LOG": "warn",
            "NIMBUS_SCHEDULE_INTERVAL_SECS": "1",
            "NIMBUS_BATCH_WORKERS": str(BATCH_WORKERS),
        },
    )


def inference_records(server: Any) -> int:
    """Inferences stored: single records in the server's state database, and the records in
    `/batch_inference` batches' pages among its blobs."""
    db = sqlite3.connect(server.data_dir / "state.sqlite3", timeout=10)
    try:
        singles = db.execute("SELECT count(*) FROM records WHERE kind = 'inference'").fetchone()[0]
    finally:
        db.close()
    paged = 0
    for page in (server.data_dir / "blobs" / "objects" / "inferences").glob("*/batches/*/page-*.jsonl"):
        paged += sum(1 for line in page.read_bytes().splitlines() if line.strip())
    return singles + paged


def local_run(
    kit: Any, bin_dir: Path, scratch: Path, data: Path, config: Path, run: int, timeout: float
) -> dict[str, Any]:
    """One fresh server, one 50,000-line batch."""
    server = start_server(kit, scratch, config, f"nimbus-batch-bench-{run}")
    try:
        return openai_batch_run(kit, server, data, LINES, timeout, calibrate=run == 0, label=f"local run {run + 1}")
    finally:
        server.stop()


def openai_batch_run(
    kit: Any, server: Any, data: Path, lines: int, timeout: float, *, calibrate: bool, label: str
) -> dict[str, Any]:
    """Upload `data` (`lines` chat requests), run it as a `/v1/batches` batch polled every 0.2 s,
    download and count the output."""
    pid = server.process.pid
    client = kit.make_client(server.api_base, timeout=120)
    calibration = provider_latency_ms(server.api_base) if calibrate else None
    start = time.perf_counter()
    with data.open("rb") as f:
        uploaded = client.files.create(file=(data.name, f), purpose="batch")
    upload_s = time.perf_counter() - start
    rss_idle_kb = proc_kb(pid, "VmRSS:")
    cpu_before = cpu_seconds(pid)
    load = MachineLoad()

    seen: dict[str, float] = {}
    timeline: list[tuple[float, int]] = []  # (s since create, request_counts.completed)
    polls = 0
    t0 = time.perf_counter()
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    seen["create_returned"] = time.perf_counter() - t0
    order = ["validating", "in_progress", "finalizing", "completed"]
    while True:
        batch = client.batches.retrieve(batch.id)
        polls += 1
        now = time.perf_counter() - t0
        if batch.request_counts and (not timeline or timeline[-1][1] != batch.request_counts.completed):
            timeline.append((now, batch.request_counts.completed))
        if batch.status in order:
            for status in order[: order.index(batch.status) + 1]:
                seen.setdefault(status, now)
        if batch.status in kit.BATCH_TERMINAL_STATUSES:
            break
        if now > timeout:
            raise SystemExit(f"local batch not done in {timeout:.0f}s: {batch.model_dump()}")
        time.sleep(0.2)
    cpu_s = cpu_seconds(pid) - cpu_before
    other = load.other_cpu_s(own_cpu_s=cpu_s)
    peak_kb = proc_kb(pid, "VmHWM:")
    if batch.status != "completed":
        raise SystemExit(f"local batch ended {batch.status}: {batch.model_dump()}")
    t_download = time.perf_counter()
    with client.files.with_streaming_response.content(batch.output_file_id) as response:
        output_lines = count_lines(response.iter_bytes(1024 * 1024))
    download_s = time.perf_counter() - t_download
    ideal = lines * MODEL_LATENCY_S / (BATCH_WORKERS * LINE_CONCURRENCY)
    # Progress moves a chunk (1,000 lines) at a time: the steady rate between 10% and 90%.
    lo = next((t, n) for t, n in timeline if n >= lines * 0.1)
    hi = next((t, n) for t, n in timeline if n >= lines * 0.9)
    result = {
        "calibration": calibration,
        "timeline": timeline,
        "steady_lines_per_s": (hi[1] - lo[1]) / (hi[0] - lo[0]) if hi[0] > lo[0] else None,
        "upload_s": upload_s,
        "wall_to_in_progress_s": seen["in_progress"],
        "wall_to_completed_s": seen["completed"],
        "first_seen_s": seen,
        "polls": polls,
        "server_timestamps": {
            k: getattr(batch, k) for k in ("created_at", "in_progress_at", "finalizing_at", "completed_at")
        },
        "request_counts": batch.request_counts.model_dump(),
        "output_lines": output_lines,
        "download_s": download_s,
        "error_file_id": batch.error_file_id,
        "ratio": seen["completed"] / ideal,
        "server_cpu_s": cpu_s,
        "other_cpu_s": other,
        "server_rss_idle_kb": rss_idle_kb,
        "server_peak_rss_kb": peak_kb,
        "inference_records": inference_records(server),
    }
    if output_lines != lines or batch.request_counts.completed != lines or batch.error_file_id:
        raise SystemExit(f"local batch output is wrong: {result}")
    log(
        f"{label}: completed in {seen['completed']:.2f}s (in_progress at {seen['in_progress']:.2f}s), "
        f"ideal {ideal:.2f}s, ratio {result['ratio']:.2f}, other CPU {other:.1f}s"
    )
    return result


def part_local(bin_dir: Path, scratch: Path, timeout: float, runs: int) -> dict[str, Any]:
    import nimbus_testkit as kit

    os.environ["NIMBUS_BIN_DIR"] = str(bin_dir)
    if not (bin_dir / "nimbus").is_file():
        raise SkipPart(f"{bin_dir / 'nimbus'} is missing (cargo build --release -p nimbus-local)")
    config = write_bench_config(scratch / "config")
    data = scratch / "input-local.jsonl"
    size = write_input(data, lines=LINES, size=None, model=MODEL)
    try:
        results = [local_run(kit, bin_dir, scratch, data, config, run, timeout) for run in range(runs)]
    finally:
        data.unlink(missing_ok=True)
    ideal = LINES * MODEL_LATENCY_S / (BATCH_WORKERS * LINE_CONCURRENCY)
    chunks = math.ceil(LINES / LINES_PER_CHUNK)
    floor = engine_floor_s(LINES, results[0]["calibration"]["latency_ms"])
    median = sorted(results, key=lambda r: r["wall_to_completed_s"])[len(results) // 2]
    return {
        "lines": LINES,
        "input_bytes": size,
        "workers": BATCH_WORKERS,
        "line_concurrency": LINE_CONCURRENCY,
        "lines_per_chunk": LINES_PER_CHUNK,
        "chunks": chunks,
        "ideal_s": ideal,
        "floor_s": floor,
        "runs": results,
        "median_wall_s": median["wall_to_completed_s"],
        "median_ratio": median["wall_to_completed_s"] / ideal,
        "median_run": results.index(median),
    }
