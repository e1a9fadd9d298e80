"""Batch event webhooks end to end on the local server, with the real OpenAI SDK on both sides:
`client.webhooks.create/list/retrieve/delete` manage the endpoints, a local HTTP receiver started by
the test gets the events, and `client.webhooks.unwrap(body, headers, secret=…)` verifies each one.

One server for the module (poller every second, loopback webhooks allowed), one receiver with a
path per endpoint. A batch that completes, one cancelled while validating and one whose input is
invalid (failed) each produce exactly one event per subscribed endpoint, and none elsewhere.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai
import pytest
import requests

import nimbus_testkit as kit

EVENT_TIMEOUT_S = 30


class Received:
    """One POST the receiver got: its path, headers (lower-cased names) and exact body bytes."""

    def __init__(self, path: str, headers: dict[str, str], body: bytes):
        self.path = path
        self.headers = headers
        self.body = body

    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


class WebhookReceiver:
    """A plain HTTP server on 127.0.0.1 recording every POST and answering 200."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                headers = {name.lower(): value for name, value in self.headers.items()}
                with receiver.lock:
                    receiver.received.append(Received(self.path, headers, body))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence per-request logs
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def posts(self, path: str, predicate: Callable[[dict[str, Any]], bool] = lambda _: True) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path and predicate(r.json())]

    def wait_for(self, path: str, predicate: Callable[[dict[str, Any]], bool], what: str) -> Received:
        deadline = time.monotonic() + EVENT_TIMEOUT_S
        while time.monotonic() < deadline:
            found = self.posts(path, predicate)
            if found:
                return found[0]
            time.sleep(0.1)
        with self.lock:
            seen = [(r.path, r.body[:200]) for r in self.received]
        raise AssertionError(f"no {what} at {path} within {EVENT_TIMEOUT_S}s; received: {seen!r}")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def server(server_factory: Callable[..., kit.NimbusServer]) -> kit.NimbusServer:
    env = {**kit.BATCH_SERVER_ENV, "NIMBUS_WEBHOOKS_ALLOW_LOOPBACK": "1"}
    return server_factory("nimbus-webhook-events", extra_env=env)


@pytest.fixture(scope="module")
def sdk(server: kit.NimbusServer) -> Iterator[openai.OpenAI]:
    with kit.make_client(server.api_base) as client:
        yield client


@pytest.fixture(scope="module")
def receiver() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    try:
        yield receiver
    finally:
        receiver.stop()


def about(batch_id: str, event_type: str) -> Callable[[dict[str, Any]], bool]:
    return lambda event: event.get("type") == event_type and event.get("data", {}).get("id") == batch_id


def verified(sdk: openai.OpenAI, received: Received, secret: str) -> Any:
    """The event as the SDK unwraps it (raises unless the signature checks out)."""
    return sdk.webhooks.unwrap(received.body, received.headers, secret=secret)


def check_event(event: Any, received: Received, event_type: str, batch: Any, ended_at: int) -> None:
    assert event.type == event_type, event
    assert event.object == "event", event
    assert event.id.startswith("evt_"), event
    assert event.data.id == batch.id, event
    assert event.created_at == ended_at, (event, batch)
    assert received.json() == {
        "object": "event",
        "id": event.id,
        "type": event_type,
        "created_at": ended_at,
        "data": {"id": batch.id},
    }
    assert received.headers["content-type"].startswith("application/json")
    assert received.headers["webhook-id"] and "." not in received.headers["webhook-id"]
    assert abs(int(received.headers["webhook-timestamp"]) - time.time()) < 120


def test_endpoints_are_managed_with_the_sdk(sdk: openai.OpenAI, receiver: WebhookReceiver) -> None:
    created = sdk.webhooks.create(
        url=receiver.url("/managed"), name="managed", event_types=["batch.completed", "batch.expired"]
    )
    assert created.object == "webhook_endpoint"
    assert created.id.startswith("whep_")
    assert created.url == receiver.url("/managed")
    assert created.name == "managed"
    assert created.event_types == ["batch.completed", "batch.expired"]
    assert created.signing_secret.startswith("whsec_")
    assert created.signing_secret_hint and created.signing_secret not in created.signing_secret_hint

    shown = sdk.webhooks.retrieve(created.id)
    assert shown.id == created.id and shown.signing_secret_hint == created.signing_secret_hint
    assert "signing_secret" not in shown.model_dump(exclude_none=True)
    assert created.id in [endpoint.id for endpoint in sdk.webhooks.list()]

    rotated = sdk.webhooks.rotate_secret(created.id, keep_old_secret_active_for_24_hours=True)
    assert rotated.signing_secret.startswith("whsec_") and rotated.signing_secret != created.signing_secret

    deleted = sdk.webhooks.delete(created.id)
    assert deleted.id == created.id and deleted.deleted is True
    assert deleted.object == "webhook_endpoint.deleted"
    with pytest.raises(openai.NotFoundError):
        sdk.webhooks.retrieve(created.id)
    assert created.id not in [endpoint.id for endpoint in sdk.webhooks.list()]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"url": "https://example.com/x", "event_types": []}, "event_types"),
        ({"url": "https://example.com/x", "event_types": ["response.completed"]}, "event_types"),
        ({"url": "https://example.com/x", "events": ["batch.done"]}, "event_types"),
        ({"url": "ftp://example.com/x", "event_types": ["batch.completed"]}, "url"),
        ({"url": "http://10.0.0.1/x", "event_types": ["batch.completed"]}, "url"),
        ({"url": "https://169.254.169.254/latest", "event_types": ["batch.completed"]}, "url"),
        ({"url": "https://example.com/x", "event_types": ["batch.completed"], "secret": "whsec_!"}, "secret"),
        ({"event_types": ["batch.completed"]}, "url"),
    ],
)
def test_bad_endpoints_are_400s_naming_the_field(server: kit.NimbusServer, body: dict, param: str) -> None:
    response = requests.post(f"{server.api_base}/webhook_endpoints", json=body, timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param, error
    assert error["type"] == "invalid_request_error"


def test_batch_events_are_signed_and_sent_once(
    sdk: openai.OpenAI, server: kit.NimbusServer, receiver: WebhookReceiver
) -> None:
    ended = sdk.webhooks.create(
        url=receiver.url("/ended"), name="ended", event_types=["batch.completed", "batch.cancelled"]
    )
    failures = sdk.webhooks.create(url=receiver.url("/failures"), name="failures", event_types=["batch.failed"])

    # A batch that completes.
    lines = [kit.chat_line(f"ok-{i}", f"question {i}") for i in range(3)]
    done = sdk.batches.create(
        input_file_id=kit.upload_batch_input(sdk, lines).id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = kit.wait_for_batch(sdk, done.id)
    assert done.status == "completed", done
    received = receiver.wait_for("/ended", about(done.id, "batch.completed"), "batch.completed")
    event = verified(sdk, received, ended.signing_secret)
    check_event(event, received, "batch.completed", done, done.completed_at)

    # A batch cancelled while it validates.
    slow = [kit.chat_line(f"slow-{i}", model="dummy-slow") for i in range(20)]
    cancelled = sdk.batches.create(
        input_file_id=kit.upload_batch_input(sdk, slow).id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    sdk.batches.cancel(cancelled.id)
    cancelled = kit.wait_for_batch(sdk, cancelled.id)
    assert cancelled.status == "cancelled", cancelled
    received = receiver.wait_for("/ended", about(cancelled.id, "batch.cancelled"), "batch.cancelled")
    check_event(verified(sdk, received, ended.signing_secret), received, "batch.cancelled", cancelled, cancelled.cancelled_at)

    # A batch whose input is invalid fails: only the endpoint subscribed to batch.failed hears of it.
    failed = sdk.batches.create(
        input_file_id=kit.upload_batch_input(sdk, ["not json"]).id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    failed = kit.wait_for_batch(sdk, failed.id)
    assert failed.status == "failed", failed
    received = receiver.wait_for("/failures", about(failed.id, "batch.failed"), "batch.failed")
    check_event(verified(sdk, received, failures.signing_secret), received, "batch.failed", failed, failed.failed_at)

    # Another endpoint's secret does not verify it.
    with pytest.raises(openai.InvalidWebhookSignatureError):
        sdk.webhooks.unwrap(received.body, received.headers, secret=ended.signing_secret)

    # Several poller passes later (every second), each event still arrived exactly once, and only
    # where it was subscribed.
    time.sleep(3)
    for path, batch_id, event_type in [
        ("/ended", done.id, "batch.completed"),
        ("/ended", cancelled.id, "batch.cancelled"),
        ("/failures", failed.id, "batch.failed"),
    ]:
        assert len(receiver.posts(path, about(batch_id, event_type))) == 1, (path, event_type)
    assert receiver.posts("/ended", lambda e: e["data"]["id"] == failed.id) == []
    assert receiver.posts("/failures", lambda e: e["data"]["id"] in (done.id, cancelled.id)) == []

    # The deliveries are listed under their endpoint with their attempts.
    response = requests.get(f"{server.api_base}/webhook_endpoints/{ended.id}/deliveries", timeout=30)
    assert response.status_code == 200, response.text
    deliveries = response.json()["data"]
    by_batch = {d["batch_id"]: d for d in deliveries}
    assert set(by_batch) >= {done.id, cancelled.id}, deliveries
    for delivery in (by_batch[done.id], by_batch[cancelled.id]):
        assert delivery["state"] == "SUCCEEDED", delivery
        assert [a["status"] for a in delivery["attempts"]] == [200], delivery
    assert by_batch[done.id]["event_type"] == "batch.completed"
    ids = {r.headers["webhook-id"] for r in receiver.posts("/ended")}
    assert by_batch[done.id]["webhook_id"] in ids
