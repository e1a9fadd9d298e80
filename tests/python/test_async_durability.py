"""Async requests on the local server survive a `kill -9`: a server restarted on the same data
directory runs, at once, what the dead one left queued (its in-process queue is gone) or running
(its lease no longer holds them back), each once, instead of letting them expire unrun.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

import nimbus_testkit as kit

# One worker and a slow model: one request runs while the others wait in the queue.
SLOW_CONFIG = """
[models.slow]
routing = ["dummy"]

[models.slow.providers.dummy]
type = "dummy"
latency_ms = 3000
"""
ONE_WORKER = {"NIMBUS_BATCH_WORKERS": "1"}


def submit(server: kit.NimbusServer, content: str) -> str:
    body = {"model_input": {"model": "slow", "messages": [{"role": "user", "content": content}]}}
    response = requests.post(f"{server.base_url}/async_predict", json=body, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["request_id"]


def status(server: kit.NimbusServer, request_id: str) -> dict[str, Any]:
    response = requests.get(f"{server.base_url}/async_request/{request_id}", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_killed_server_runs_its_queued_and_running_async_requests_after_a_restart(
    server_factory: Callable[..., kit.NimbusServer], tmp_path: Path
) -> None:
    config = tmp_path / "slow.toml"
    config.write_text(SLOW_CONFIG)
    data_dir = tmp_path / "data"
    first = server_factory("nimbus-async-killed", data_dir=data_dir, config=config, extra_env=ONE_WORKER)
    running = submit(first, "running")
    kit.wait_until(
        lambda: status(first, running)["status"] == "IN_PROGRESS", timeout=10, what="the first request to start"
    )
    queued = [submit(first, f"queued-{i}") for i in range(2)]
    assert [status(first, q)["status"] for q in queued] == ["QUEUED", "QUEUED"]

    os.killpg(first.process.pid, signal.SIGKILL)
    first.process.proc.wait(timeout=10)
    first.stop()

    second = server_factory("nimbus-async-restarted", data_dir=data_dir, config=config, extra_env=ONE_WORKER)
    ids = [running, *queued]
    # Three runs of 3 s one after the other; without the takeover nothing would run for minutes.
    kit.wait_until(
        lambda: all(status(second, i)["status"] == "SUCCEEDED" for i in ids),
        timeout=30,
        what="every request the killed server left to succeed",
    )
    for request_id, content in zip(ids, ["running", "queued-0", "queued-1"], strict=True):
        view = status(second, request_id)
        assert view["output"]["choices"][0]["message"]["content"], view
        assert view["webhook_status"] == "NO_WEBHOOK_PROVIDED", view
        # The killed run's attempt stays on record, closed; the queued ones ran once.
        assert len(view["attempts"]) == (2 if content == "running" else 1), view
        assert all(attempt["finished_at"] for attempt in view["attempts"]), view
