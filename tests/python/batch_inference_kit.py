"""Helpers for the `/batch_inference` tests (test_batch_inference*.py): plain HTTP (`httpx`; the
`tensorzero` client has no batch method) on a local server whose config has
tensorzero_config/test_functions.toml on the module's own recording upstream (mock_upstream.py).

Fixtures (module scope; import them into a test module): `upstream`, `config`, `projects` (one
server with a key for project `alpha` and one for `beta`), `alpha` and `beta` (a `Gateway` each).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import nimbus_testkit as kit
import tensorzero_kit as tzk
from mock_upstream import RecordingUpstream

GREETING = [{"type": "text", "text": "Hello from choice 0"}]
USAGE = {"input_tokens": 4, "output_tokens": 4}
DONE_WITHIN_S = 60.0


# How long a synchronous inference's record may take to be stored after its answer.
RECORD_WITHIN_S = 10.0


class Gateway:
    """Plain HTTP on a server's root with one project's key."""

    def __init__(self, server: kit.NimbusServer, key: str):
        self.server = server
        self.http = httpx.Client(base_url=server.base_url, headers={"authorization": f"Bearer {key}"}, timeout=30)

    def submit(self, body: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post("/batch_inference", json=body)
        assert response.status_code == 200, response.text
        created = response.json()
        assert set(created) == {"batch_id", "inference_ids", "episode_ids"}, created
        count = len(body["inputs"])
        assert len(created["inference_ids"]) == len(created["episode_ids"]) == count, created
        ids = [created["batch_id"], *created["inference_ids"], *created["episode_ids"]]
        assert all(uuid.UUID(value).version == 7 for value in ids), created
        assert len(set(created["inference_ids"])) == count, created
        return created

    def refused(self, status: int, body: dict[str, Any]) -> str:
        """POST `body`, which must be refused with `status`; TensorZero's error message."""
        return error_of(self.http.post("/batch_inference", json=body), status)

    def get(self, path: str, **query: Any) -> httpx.Response:
        return self.http.get(path, params={k: str(v).lower() if isinstance(v, bool) else v for k, v in query.items()})

    def poll(self, batch_id: str, **query: Any) -> dict[str, Any]:
        response = self.get(f"/batch_inference/{batch_id}", **query)
        assert response.status_code == 200, response.text
        return response.json()

    def poll_one(self, batch_id: str, inference_id: str, **query: Any) -> dict[str, Any]:
        response = self.get(f"/batch_inference/{batch_id}/inference/{inference_id}", **query)
        assert response.status_code == 200, response.text
        return response.json()

    def finished(self, batch_id: str) -> dict[str, Any]:
        """Poll until the batch is no longer pending; that poll."""
        deadline = time.monotonic() + DONE_WITHIN_S
        while True:
            polled = self.poll(batch_id)
            if polled != {"status": "pending"}:
                return polled
            assert time.monotonic() < deadline, f"batch {batch_id} still pending after {DONE_WITHIN_S:.0f}s"
            time.sleep(0.1)

    def record(self, inference_id: str) -> dict[str, Any]:
        """The stored record of an inference. A synchronous `/inference` stores it after its answer
        (deferred work), so a 404 right after the answer is waited out for a few seconds."""
        deadline = time.monotonic() + RECORD_WITHIN_S
        while True:
            response = self.http.get(f"/inferences/{inference_id}")
            if response.status_code != 404 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert response.status_code == 200, response.text
        return response.json()

    def close(self) -> None:
        self.http.close()


def error_of(response: httpx.Response, status: int) -> str:
    """The message of TensorZero's error body `{"error": "<message>"}`, asserting the status and shape."""
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert isinstance(body, dict) and set(body) == {"error"} and isinstance(body["error"], str), body
    return body["error"]


def chat_reply(created: dict[str, Any], index: int, variant: str, content: Any = None, **changes: Any) -> dict[str, Any]:
    """What `/inference` answers for item `index` of a chat batch on the recording upstream."""
    reply = {
        "inference_id": created["inference_ids"][index],
        "episode_id": created["episode_ids"][index],
        "variant_name": variant,
        "content": GREETING if content is None else content,
        "usage": USAGE,
        "finish_reason": "stop",
    }
    reply.update(changes)
    return reply


def relay_batch(texts: list[str], **fields: Any) -> dict[str, Any]:
    return {"function_name": "relay", "inputs": [tzk.says(text) for text in texts], **fields}


def email(topic: str, recipient: str = "Bob") -> dict[str, Any]:
    return tzk.email_input({"recipient": recipient, "topic": topic})


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def upstream() -> Iterator[RecordingUpstream]:
    recording = RecordingUpstream()
    try:
        yield recording
    finally:
        recording.stop()


@pytest.fixture(scope="module")
def config(upstream: RecordingUpstream, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tzk.write_test_config(tmp_path_factory.mktemp("batch-inference-config"), upstream.api_base)


@pytest.fixture(scope="module")
def projects(config: Path, server_factory: Callable[..., kit.NimbusServer]) -> tuple[kit.NimbusServer, dict[str, str]]:
    keys: dict[str, str] = {}

    def create(cli: kit.NimbusCli) -> None:
        for project in ("alpha", "beta"):
            keys[project] = cli.create_key(project, name=f"batch-inference-{project}")["api_key"]

    server = server_factory("nimbus-batch-inference", before_start=create, config=config, extra_env=kit.BATCH_SERVER_ENV)
    return server, keys


def _gateway(projects: tuple[kit.NimbusServer, dict[str, str]], project: str) -> Iterator[Gateway]:
    server, keys = projects
    gateway = Gateway(server, keys[project])
    try:
        yield gateway
    finally:
        gateway.close()


@pytest.fixture(scope="module")
def alpha(projects: tuple[kit.NimbusServer, dict[str, str]]) -> Iterator[Gateway]:
    yield from _gateway(projects, "alpha")


@pytest.fixture(scope="module")
def beta(projects: tuple[kit.NimbusServer, dict[str, str]]) -> Iterator[Gateway]:
    yield from _gateway(projects, "beta")
