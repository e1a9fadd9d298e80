"""Part `tz-local`: a 10,000-input `/batch_inference` batch on a release `nimbus serve`, submitted
over HTTP, polled every 0.2 s to `completed` with every inference in the reply, against the ideal
inputs × latency ÷ (workers × line_concurrency); beside it the same 10,000 requests as a
`/v1/batches` chat batch (part `local`'s run). Runs alternate between the two, each on a fresh
server, so that peak RSS and the records count belong to one batch."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

from .common import (
    BATCH_WORKERS,
    LINE_CONCURRENCY,
    LINES_PER_CHUNK,
    MODEL,
    MODEL_LATENCY_S,
    TZ_FUNCTION,
    TZ_INPUTS,
    TZ_SYSTEM_TEXT,
    MachineLoad,
    SkipPart,
    cpu_seconds,
    engine_floor_s,
    log,
    proc_kb,
    write_bench_config,
    write_input,
)
from .local_batch import inference_records, openai_batch_run, provider_latency_ms, start_server
from .tz_client import BatchInferenceClient, check_inferences


def tz_run(kit: Any, server: Any, inputs: int, timeout: float, *, calibrate: bool, label: str) -> dict[str, Any]:
    """One `/batch_inference` batch: POST, poll every 0.2 s (no paging: the local server has no
    reply size limit), check every inference, count the records."""
    pid = server.process.pid
    client = BatchInferenceClient(server.base_url, "unused-local-key")
    calibration = provider_latency_ms(server.api_base) if calibrate else None
    rss_idle_kb = proc_kb(pid, "VmRSS:")
    cpu_before = cpu_seconds(pid)
    load = MachineLoad()
    t0 = time.perf_counter()
    created = client.submit(inputs)
    submit_s = time.perf_counter() - t0
    polled = client.poll_until_ended(created["batch_id"], timeout=timeout)
    done_s = time.perf_counter() - t0
    cpu_s = cpu_seconds(pid) - cpu_before
    other = load.other_cpu_s(own_cpu_s=cpu_s)
    reply = polled["reply"]
    inferences = reply.get("inferences") or []
    check_inferences(created, reply, inferences)
    records = inference_records(server)
    if records != inputs:
        raise SystemExit(f"{label}: {records} inference records for {inputs} inputs")
    ideal = inputs * MODEL_LATENCY_S / (BATCH_WORKERS * LINE_CONCURRENCY)
    result = {
        "calibration": calibration,
        "submit_s": submit_s,
        # The poll that saw `completed` carries every inference: from the POST to its start (the
        # batch was done by then) and to its return (all results in hand).
        "wall_to_completed_poll_s": submit_s + polled["ended_poll_started_s"],
        "wall_with_results_s": done_s,
        "final_poll_s": polled["ended_poll_returned_s"] - polled["ended_poll_started_s"],
        "final_reply_bytes": polled["reply_bytes"],
        "polls": polled["polls"],
        "inferences": len(inferences),
        "ratio": done_s / ideal,
        "server_cpu_s": cpu_s,
        "other_cpu_s": other,
        "server_rss_idle_kb": rss_idle_kb,
        "server_peak_rss_kb": proc_kb(pid, "VmHWM:"),
        "inference_records": records,
    }
    log(
        f"{label}: POST {submit_s:.2f}s, completed with {len(inferences):,} inferences at {done_s:.2f}s "
        f"(final poll {result['final_poll_s']:.2f}s, {polled['reply_bytes'] / 1e6:.1f} MB), ideal {ideal:.2f}s, "
        f"ratio {result['ratio']:.2f}, {records:,} records, other CPU {other:.1f}s"
    )
    return result


def part_tz_local(bin_dir: Path, scratch: Path, timeout: float, runs: int) -> dict[str, Any]:
    import nimbus_testkit as kit

    os.environ["NIMBUS_BIN_DIR"] = str(bin_dir)
    if not (bin_dir / "nimbus").is_file():
        raise SkipPart(f"{bin_dir / 'nimbus'} is missing (cargo build --release -p nimbus-local)")
    config = write_bench_config(scratch / "config")
    data = scratch / "input-tz-local.jsonl"
    size = write_input(data, lines=TZ_INPUTS, size=None, model=MODEL, system=TZ_SYSTEM_TEXT)
    tz: list[dict[str, Any]] = []
    openai: list[dict[str, Any]] = []
    try:
        for run in range(runs):
            server = start_server(kit, scratch, config, f"nimbus-tz-bench-{run}")
            try:
                tz.append(tz_run(kit, server, TZ_INPUTS, timeout, calibrate=run == 0, label=f"tz-local run {run + 1}"))
            finally:
                server.stop()
            server = start_server(kit, scratch, config, f"nimbus-tz-openai-bench-{run}")
            try:
                run_result = openai_batch_run(
                    kit, server, data, TZ_INPUTS, timeout, calibrate=False, label=f"tz-local /v1/batches run {run + 1}"
                )
            finally:
                server.stop()
            run_result["wall_with_results_s"] = run_result["wall_to_completed_s"] + run_result["download_s"]
            openai.append(run_result)
    finally:
        data.unlink(missing_ok=True)
    ideal = TZ_INPUTS * MODEL_LATENCY_S / (BATCH_WORKERS * LINE_CONCURRENCY)
    latency_ms = tz[0]["calibration"]["latency_ms"]

    def median_of(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
        return {"median_s": statistics.median(r[key] for r in rows), "runs_s": [r[key] for r in rows]}

    return {
        "profile": bin_dir.name,
        "inputs": TZ_INPUTS,
        "function": TZ_FUNCTION,
        "model": MODEL,
        "openai_input_bytes": size,
        "workers": BATCH_WORKERS,
        "line_concurrency": LINE_CONCURRENCY,
        "lines_per_chunk": LINES_PER_CHUNK,
        "ideal_s": ideal,
        "floor_s": engine_floor_s(TZ_INPUTS, latency_ms),
        "latency_ms": latency_ms,
        "tz_runs": tz,
        "openai_runs": openai,
        "tz_with_results": median_of(tz, "wall_with_results_s"),
        "openai_to_completed": median_of(openai, "wall_to_completed_s"),
        "openai_with_results": median_of(openai, "wall_with_results_s"),
    }
