"""Part `native`: a 50,000-line batch whose model's provider has `batch = "native"`, on the AWS
path of part `aws` (moto behind the counting proxy, the batch functions under the RIE), with a
second Nimbus (`nimbus serve`, a dummy model) as the provider behind a counting relay. Counts the
AWS requests and the provider requests of the batch, and the time from the provider batch being
`completed` to the Nimbus batch being `completed`."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from .aws_requests import part_aws
from .common import LINES, log

NATIVE_MODEL = "bench-native"
UPSTREAM_MODEL = "up-model"
UPSTREAM_KEY_ENV = "NIMBUS_BENCH_UPSTREAM_KEY"
# Polling as a deployment would configure it, shortened so the run stays short: the scheduler
# here runs a pass every second while the queue is idle (EventBridge: once a minute).
POLL_INTERVAL_MS = 1000
POLL_MAX_INTERVAL_MS = 4000

UPSTREAM_CONFIG = f"""
[batches]
lines_per_chunk = 5000

[models.{UPSTREAM_MODEL}]
routing = ["dummy"]
[models.{UPSTREAM_MODEL}.providers.dummy]
type = "dummy"
"""


def native_config(api_base: str) -> str:
    """What the downstream config adds: the native model and the poll settings."""
    return (
        f"[models.{NATIVE_MODEL}]\nrouting = [\"up\"]\n[models.{NATIVE_MODEL}.providers.up]\n"
        f'type = "openai"\nmodel_name = "{UPSTREAM_MODEL}"\napi_base = "{api_base}"\n'
        f'api_key_location = "env::{UPSTREAM_KEY_ENV}"\nbatch = "native"\n'
    )


def with_poll_settings(config: str) -> str:
    """`config` with the native poll settings in its `[batches]` table."""
    settings = f"native_poll_interval_ms = {POLL_INTERVAL_MS}\nnative_poll_max_interval_ms = {POLL_MAX_INTERVAL_MS}\n"
    return config.replace("[batches]\n", f"[batches]\n{settings}", 1)


def operation(method: str, path: str) -> str:
    """A provider request's operation: its method and path with ids left out."""
    parts = path.split("?")[0].rstrip("/").split("/")
    shape = "/".join("{id}" if part.startswith(("file-", "batch_")) else part for part in parts)
    return f"{method} {shape}"


def part_native_aws(bin_dir: Path, scratch: Path, timeout: float, worker_instances: int) -> dict[str, Any]:
    import nimbus_testkit as kit
    from mock_batch_upstream import RecordingRelay

    data_dir = scratch / "upstream-data"
    key = kit.NimbusCli(kit.clean_env({"NIMBUS_DATA_DIR": str(data_dir)})).create_key("upstream", name="bench")
    config = scratch / "upstream.toml"
    config.write_text(UPSTREAM_CONFIG)
    upstream = kit.NimbusServer(
        data_dir,
        scratch / "logs",
        config=config,
        name="bench-upstream",
        extra_env={"NIMBUS_SCHEDULE_INTERVAL_SECS": "1", "RUST_LOG": "warn"},
    )
    relay = RecordingRelay(upstream.base_url)
    sdk = kit.make_client(upstream.api_base, key["api_key"], timeout=120)
    seen: dict[str, Any] = {}

    def watch() -> None:
        """The provider batch's status as the provider tells it (not counted: the relay is bypassed)."""
        if "completed_at" in seen:
            return
        for batch in sdk.batches.list(limit=10).data:
            if (batch.metadata or {}).get("nimbus_part") is not None:
                seen["id"] = batch.id
                seen["status"] = batch.status
                if batch.status in kit.BATCH_TERMINAL_STATUSES:
                    seen["completed_at"] = time.perf_counter()
                    seen["final"] = batch.model_dump()

    try:
        result = part_aws(
            bin_dir,
            scratch,
            timeout,
            worker_instances,
            lines=LINES,
            model=NATIVE_MODEL,
            edit_config=lambda text: f"{with_poll_settings(text).rstrip()}\n\n{native_config(relay.api_base)}",
            extra_env={UPSTREAM_KEY_ENV: key["api_key"]},
            watch=watch,
        )
    finally:
        sdk.close()
        relay.stop()
        upstream.stop()
    # The downstream's `completed`, first seen by the status polls (every second), after the
    # provider's `completed`, first seen by `watch` just before each of those polls.
    completed_at = result["created_perf_s"] + result["first_seen_s"]["completed"]
    provider_requests = Counter(operation(e.method, e.path) for e in relay.exchanges)
    uploaded = sum(len(e.request_body) for e in relay.exchanges if e.method == "POST" and e.path.endswith("/files"))
    downloaded = sum(len(e.response_body) for e in relay.exchanges if e.path.endswith("/content"))
    result.update(
        {
            "native": True,
            "provider_batch": seen.get("final"),
            "provider_requests": dict(provider_requests),
            "provider_requests_total": sum(provider_requests.values()),
            "provider_bytes_up": uploaded,
            "provider_bytes_down": downloaded,
            "provider_done_to_completed_s": completed_at - seen["completed_at"] if "completed_at" in seen else None,
            "poll_interval_ms": POLL_INTERVAL_MS,
            "poll_max_interval_ms": POLL_MAX_INTERVAL_MS,
        }
    )
    log(
        f"native: {result['provider_requests_total']} provider requests, "
        f"provider done → completed in {result['provider_done_to_completed_s']}"
    )
    return result
