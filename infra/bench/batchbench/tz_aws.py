"""Part `tz-aws`: the AWS requests of a 10,000-input `/batch_inference` batch on the Lambda path
(part `aws`'s stack: moto behind the counting proxy, the functions under the RIE, this script
playing the SQS event source and the schedule), beside a 10,000-line `/v1/batches` batch of the
same requests measured the same way (part `aws` itself, on a fresh stack).

Phases of the proxy's entries for `/batch_inference`: `batch` is the POST (the batches function
stores the items and queues the batch) and everything the worker and poller do until the batch
has ended; the client's pending polls come from the `status` instance (counted apart, as for
`/v1/batches`); `fetch` is the poll that saw `completed` (with the first page) and the pages after
it (`limit`/`after`: a Lambda reply carries at most 4 MiB).

Both stacks have the proxy hand moto one request at a time (`CountingProxy(serialize=True)`): moto
breaks under the concurrent record writes of a 10,000-item batch (see `CountingProxy`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .aws_requests import AwsStack, part_aws
from .common import MODEL, TZ_FUNCTION, TZ_INPUTS, TZ_SYSTEM_TEXT, log
from .tz_client import BatchInferenceClient, check_inferences

# Inferences per poll reply on the Lambda path: about 0.3 KB each, so far below the 4 MiB a reply
# may carry.
TZ_PAGE = 2000


def tz_aws_run(bin_dir: Path, scratch: Path, timeout: float, worker_instances: int) -> dict[str, Any]:
    stack = AwsStack(bin_dir, scratch, worker_instances, serialize_moto=True)
    try:
        proxy = stack.proxy
        assert proxy is not None
        api_key = stack.key["api_key"]
        submitter = BatchInferenceClient(stack.relays["batches"].base_url, api_key)
        poller = BatchInferenceClient(stack.relays["status"].base_url, api_key)

        proxy.phase = "batch"
        t_create = time.perf_counter()
        created = submitter.submit(TZ_INPUTS)
        submit_s = time.perf_counter() - t_create
        batch_id = created["batch_id"]
        ended: dict[str, Any] = {}

        def poll() -> str:
            entries_before = len(proxy.entries)
            durations_before = len(stack.status.durations)
            started = time.perf_counter()
            reply, size = poller.get(batch_id, limit=TZ_PAGE)
            if reply.get("status") == "pending":
                return "pending"
            ended.update(
                reply=reply,
                bytes=size,
                entries_from=entries_before,
                durations_from=durations_before,
                poll_s=time.perf_counter() - started,
                at_s=time.perf_counter() - t_create,
            )
            return "completed" if reply.get("status") == "completed" else "failed"

        run = stack.run_batch(poll, timeout, t_create)
        # The poll that saw the end carried the first page: its requests belong to fetching.
        for entry in proxy.entries[ended["entries_from"] :]:
            if entry["function"] == "status" and entry["phase"] == "batch":
                entry["phase"] = "fetch"
        proxy.phase = "fetch"
        t_fetch = time.perf_counter()
        inferences, pages, pages_bytes = poller.fetch_rest(batch_id, ended["reply"], TZ_PAGE)
        fetch_rest_s = time.perf_counter() - t_fetch
        proxy.phase = "done"
        check_inferences(created, ended["reply"], inferences)
        records = stack.inference_records()
        if records != TZ_INPUTS:
            raise SystemExit(f"tz-aws: {records} inference records for {TZ_INPUTS} inputs")
        durations = stack.durations()
        result = {
            "inputs": TZ_INPUTS,
            "function": TZ_FUNCTION,
            "model": MODEL,
            "worker_instances": worker_instances,
            "page": TZ_PAGE,
            "submit_s": submit_s,
            **run,
            "completed_seen_s": ended["at_s"],
            "fetch_s": ended["poll_s"] + fetch_rest_s,
            "pages": pages,
            "fetched_bytes": ended["bytes"] + pages_bytes,
            "inferences": len(inferences),
            "inference_records": records,
            "durations_s": durations,
            "fetch_durations_s": durations["status"][ended["durations_from"] :],
            "entries": proxy.entries,
            "idle_poll_entries": stack.idle_poll_entries,
            "config_source": stack.config_source,
            "serialized_moto": True,
        }
        counted = sum(1 for e in proxy.entries if e["phase"] == "batch" and e["function"] != "status")
        fetched = sum(1 for e in proxy.entries if e["phase"] == "fetch")
        log(
            f"tz-aws: POST {submit_s:.1f}s, completed seen at {ended['at_s']:.1f}s with {worker_instances} worker "
            f"instances; {counted + run['event_source']['deletes']} requests, {fetched} more fetching "
            f"{len(inferences):,} inferences in {pages} pages; {records:,} records"
        )
        return result
    finally:
        stack.close()


def part_tz_aws(bin_dir: Path, scratch: Path, timeout: float, worker_instances: int) -> dict[str, Any]:
    tz = tz_aws_run(bin_dir, scratch, timeout, worker_instances)
    openai = part_aws(
        bin_dir,
        scratch,
        timeout,
        worker_instances,
        lines=TZ_INPUTS,
        model=MODEL,
        system=TZ_SYSTEM_TEXT,
        serialize_moto=True,
    )
    return {"inputs": TZ_INPUTS, "tz": tz, "openai": openai, "profile": bin_dir.name}
