"""Async inference (Baseten's `/async_predict`) end to end on the local server, with a real webhook
receiver on loopback (async_kit.py) and the recording upstream (mock_upstream.py) as the model:
signatures checked with the `standardwebhooks` package and Baseten's recipe, priority order with one
worker, expiry, cancel, inference retries, webhook retries and failure, unsafe webhook URLs, tenant
isolation, the per-model URLs with `Api-Key`, every bad field, and the embeddings and `/inference`
endpoints.

The main server runs ONE queue worker (`NIMBUS_BATCH_WORKERS=1`): a request held at the upstream
(`upstream.hold`) holds the whole queue, which is how the priority, expiry and cancel tests line
up requests behind it. Its webhook retries come after 1 s each (`[webhooks] retry_delays_s`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import openai
import pytest

import nimbus_testkit as kit
from async_kit import (
    ASYNC_SERVER_ENV,
    UPSTREAM_MODEL,
    WEBHOOK_ATTEMPTS,
    AsyncApi,
    ReceivedWebhook,
    WebhookReceiver,
    baseten_error,
    chat_input,
    has_status,
    tag,
    verify_baseten,
    verify_standard,
    write_async_config,
)
from mock_upstream import RecordingUpstream

STATUS_KEYS = {
    "request_id",
    "model_id",
    "deployment_id",
    "status",
    "webhook_status",
    "created_at",
    "status_at",
    "errors",
    "endpoint",
    "priority",
    "max_time_in_queue_seconds",
    "started_at",
    "finished_at",
    "attempts",
    "expires_at",
}
WEBHOOK_BODY_KEYS = {"request_id", "model_id", "deployment_id", "type", "time", "data", "errors"}


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
def receiver() -> Iterator[WebhookReceiver]:
    hooks = WebhookReceiver()
    try:
        yield hooks
    finally:
        hooks.stop()


@pytest.fixture(scope="module")
def server(
    upstream: RecordingUpstream, server_factory: Callable[..., kit.NimbusServer], tmp_path_factory: pytest.TempPathFactory
) -> kit.NimbusServer:
    """An open server (loopback, no keys; loopback webhooks allowed, the default of `nimbus serve`)."""
    config = write_async_config(tmp_path_factory.mktemp("async-config"), upstream.api_base)
    return server_factory("nimbus-async", config=config, extra_env=ASYNC_SERVER_ENV)


@pytest.fixture(scope="module")
def api(server: kit.NimbusServer) -> AsyncApi:
    return AsyncApi(server.base_url)


@pytest.fixture(scope="module")
def secret(server: kit.NimbusServer, api: AsyncApi) -> str:
    """The project's webhook secret, created before any request (without one nothing is sent)."""
    response = api.post("/v1/webhook_secrets", {})
    assert response.status_code == 200, response.text
    created = response.json()
    assert created["object"] == "webhook_secret", created
    assert created["secret"].startswith("whsec_"), "the secret is shown once, in full"
    assert isinstance(created["id"], str) and isinstance(created["created_at"], int), created
    return created["secret"]


PROJECT_A, PROJECT_B = "async-tenant-a", "async-tenant-b"


@pytest.fixture(scope="module")
def keyed(server_factory: Callable[..., kit.NimbusServer]) -> tuple[kit.NimbusServer, dict[str, str]]:
    """A server with keys of two projects (auth required) that refuses loopback webhooks
    (`NIMBUS_WEBHOOKS_ALLOW_LOOPBACK=0`, as in Lambda)."""
    keys: dict[str, str] = {}

    def create(cli: kit.NimbusCli) -> None:
        for project in (PROJECT_A, PROJECT_B):
            keys[project] = cli.create_key(project, name=f"{project}-key")["api_key"]

    server = server_factory(
        "nimbus-async-keyed",
        before_start=create,
        extra_env={**ASYNC_SERVER_ENV, "NIMBUS_BATCH_WORKERS": "2", "NIMBUS_WEBHOOKS_ALLOW_LOOPBACK": "0"},
    )
    return server, keys


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def check_status_shape(status: dict[str, Any]) -> None:
    assert set(status) >= STATUS_KEYS, sorted(STATUS_KEYS - set(status))
    assert status["deployment_id"] is None
    assert status["status"] in {"QUEUED", "IN_PROGRESS", "SUCCEEDED", "FAILED", "EXPIRED", "CANCELED", "WEBHOOK_FAILED"}
    assert status["webhook_status"] in {"PENDING", "SUCCEEDED", "FAILED", "CANCELED", "NO_WEBHOOK_PROVIDED"}
    for error in status["errors"]:
        assert set(error) == {"code", "message"} and error["message"], error
    parse_time(status["created_at"])
    parse_time(status["status_at"])


def check_webhook(hook: ReceivedWebhook, secret: str, request_id: str) -> dict[str, Any]:
    """Both signatures verify with the receivers' own recipes; the body is Baseten's, for `request_id`."""
    payload = verify_standard(secret, hook)
    assert verify_baseten(secret, hook), hook.headers
    body = hook.json()
    assert payload == body, "standardwebhooks returns the body it verified"
    assert set(body) == WEBHOOK_BODY_KEYS, body
    assert body["request_id"] == request_id
    assert body["type"] == "async_request_completed"
    assert hook.headers["x-baseten-request-id"] == request_id
    assert hook.headers["content-type"].startswith("application/json")
    # Standard Webhooks: integer seconds; the id is stable and has no dot.
    assert hook.headers["webhook-timestamp"].isdigit()
    assert abs(int(hook.headers["webhook-timestamp"]) - time.time()) < 300
    assert "." not in hook.headers["webhook-id"]
    assert abs(parse_time(body["time"]).timestamp() - time.time()) < 300
    return body


def upstream_order(upstream: RecordingUpstream, tags: list[str]) -> list[str]:
    """Which of `tags` the upstream received, in the order it received them."""
    order = []
    for request in list(upstream.requests):
        messages = json.dumps(request.body.get("messages"))
        order += [t for t in tags if t in messages]
    return order


def submit_held(api: AsyncApi, upstream: RecordingUpstream, marker: str, **fields: Any) -> str:
    """Submit a request to the upstream model that `upstream.hold(marker)` holds, and wait until it
    is at the upstream (so the only worker is busy with it). Call inside the hold."""
    request_id = api.submit_ok({"model_input": chat_input(f"hold {marker}", model=UPSTREAM_MODEL), **fields})
    kit.wait_until(lambda: upstream.with_text(marker), timeout=30, what="the held request at the upstream")
    return request_id


# --------------------------------------------------------------------------------------------
# The happy path and the signatures
# --------------------------------------------------------------------------------------------


def test_result_is_delivered_signed_both_ways(api: AsyncApi, receiver: WebhookReceiver, secret: str) -> None:
    path = receiver.new_path()
    request_id = api.submit_ok(
        {"model_input": chat_input("Hello async"), "webhook_endpoint": receiver.url(path), "priority": 0}
    )
    status = api.wait(request_id)
    check_status_shape(status)
    assert status["status"] == "SUCCEEDED" and status["webhook_status"] == "SUCCEEDED", status
    assert status["model_id"] == "dummy" and status["endpoint"] == "/v1/chat/completions"
    assert status["priority"] == 0 and status["max_time_in_queue_seconds"] == 600 and status["errors"] == []
    assert len(status["attempts"]) == 1 and status["attempts"][0]["error"] is None, status
    assert parse_time(status["created_at"]) <= parse_time(status["started_at"]) <= parse_time(status["finished_at"])

    # The output is exactly what /v1/chat/completions answers: the OpenAI SDK's own type reads it.
    completion = openai.types.chat.ChatCompletion.model_validate(status["output"])
    assert completion.object == "chat.completion" and completion.choices[0].message.content
    stored = api.output(request_id)
    assert stored.status_code == 200 and stored.json() == status["output"]

    [hook] = receiver.wait_for(path)
    body = check_webhook(hook, secret, request_id)
    assert body["model_id"] == "dummy" and body["errors"] == []
    assert body["data"] == {"output": status["output"]}
    webhook = status["webhook"]
    assert webhook["url"] == receiver.url(path)
    assert webhook["webhook_id"] == hook.headers["webhook-id"]
    assert [attempt["status_code"] for attempt in webhook["attempts"]] == [200]
    assert webhook["next_attempt_at"] is None


def test_signatures_fail_with_another_secret_or_altered_bytes(
    api: AsyncApi, receiver: WebhookReceiver, secret: str
) -> None:
    """Non-vacuous: the same checks refuse a wrong secret and a body changed by one byte."""
    from standardwebhooks import Webhook  # noqa: PLC0415
    from standardwebhooks.webhooks import WebhookVerificationError  # noqa: PLC0415

    path = receiver.new_path()
    request_id = api.submit_ok({"model_input": chat_input("Sign me"), "webhook_endpoint": receiver.url(path)})
    api.wait(request_id)
    [hook] = receiver.wait_for(path)
    other = "whsec_" + "A" * 32
    with pytest.raises(WebhookVerificationError):
        Webhook(other).verify(hook.body, hook.headers)
    assert not verify_baseten(other, hook)
    altered = ReceivedWebhook(hook.path, hook.headers, hook.body.replace(b"async_request", b"async_requesT"), hook.at, 200)
    with pytest.raises(WebhookVerificationError):
        verify_standard(secret, altered)
    assert not verify_baseten(secret, altered)
    # The Baseten key is the secret string's bytes, not Standard Webhooks' decoded key.
    assert verify_baseten(secret, hook)


def test_without_a_webhook_the_result_is_polled(api: AsyncApi) -> None:
    request_id = api.submit_ok({"model_input": chat_input("No hook")})
    status = api.wait(request_id)
    assert status["status"] == "SUCCEEDED" and status["webhook_status"] == "NO_WEBHOOK_PROVIDED", status
    assert "webhook" not in status
    listed = api.list(status="SUCCEEDED", limit=100).json()
    assert request_id in {item["request_id"] for item in listed["data"]}
    assert request_id not in {item["request_id"] for item in api.list(status="FAILED", limit=100).json()["data"]}


# --------------------------------------------------------------------------------------------
# Priority, expiry and cancel behind a held worker
# --------------------------------------------------------------------------------------------


def test_priority_zero_runs_before_queued_priority_two(api: AsyncApi, upstream: RecordingUpstream) -> None:
    marker = tag("hold-priority")
    low = [tag("p2") for _ in range(5)]
    high = [tag("p0") for _ in range(3)]
    with upstream.hold(marker):
        holder = submit_held(api, upstream, marker)
        # Queued behind the held request: all the priority-2 ones first, then the priority-0 ones.
        low_ids = [api.submit_ok({"model_input": chat_input(t, model=UPSTREAM_MODEL), "priority": 2}) for t in low]
        high_ids = [api.submit_ok({"model_input": chat_input(t, model=UPSTREAM_MODEL), "priority": 0}) for t in high]
        for request_id in low_ids + high_ids:
            assert api.status(request_id)["status"] == "QUEUED"
        assert api.status(holder)["status"] == "IN_PROGRESS"
    for request_id in [holder, *low_ids, *high_ids]:
        assert api.wait(request_id)["status"] == "SUCCEEDED"
    # The order the one worker called the model in: every priority 0 before any priority 2.
    order = upstream_order(upstream, low + high)
    assert len(order) == len(low) + len(high), order
    assert set(order[: len(high)]) == set(high), f"upstream call order: {order}"
    starts = {rid: parse_time(api.status(rid)["started_at"]) for rid in low_ids + high_ids}
    assert max(starts[rid] for rid in high_ids) <= min(starts[rid] for rid in low_ids), starts


def test_request_not_started_in_time_expires(
    api: AsyncApi, upstream: RecordingUpstream, receiver: WebhookReceiver, secret: str
) -> None:
    marker = tag("hold-expiry")
    waiting = tag("expires")
    path = receiver.new_path()
    with upstream.hold(marker):
        submit_held(api, upstream, marker)
        request_id = api.submit_ok(
            {
                "model_input": chat_input(waiting, model=UPSTREAM_MODEL),
                "webhook_endpoint": receiver.url(path),
                "max_time_in_queue_seconds": 10,
            }
        )
        # The scheduler (a pass every second) expires it while the only worker is still busy.
        status = api.wait(request_id, has_status("EXPIRED"), timeout=30)
        assert [error["code"] for error in status["errors"]] == ["ASYNC_REQUEST_EXPIRED"], status
        assert status["attempts"] == [] and status["started_at"] is None, status
        waited = parse_time(status["status_at"]) - parse_time(status["created_at"])
        assert waited.total_seconds() >= 10, status
    status = api.wait(request_id)
    assert status["status"] == "EXPIRED" and status["webhook_status"] == "SUCCEEDED", status
    [hook] = receiver.wait_for(path)
    body = check_webhook(hook, secret, request_id)
    assert body["data"] is None
    assert [error["code"] for error in body["errors"]] == ["ASYNC_REQUEST_EXPIRED"], body
    assert upstream.with_text(waiting) == [], "an expired request never reaches the model"
    assert "output" not in status and api.output(request_id).status_code == 404


def test_cancel_queued_and_in_progress(
    api: AsyncApi, upstream: RecordingUpstream, receiver: WebhookReceiver, secret: str
) -> None:
    marker = tag("hold-cancel")
    queued_text = tag("canceled")
    path = receiver.new_path()
    with upstream.hold(marker):
        holder = submit_held(api, upstream, marker)
        queued = api.submit_ok(
            {"model_input": chat_input(queued_text, model=UPSTREAM_MODEL), "webhook_endpoint": receiver.url(path)}
        )
        response = api.cancel(holder)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["request_id"] == holder and answer["canceled"] is False, answer
        assert "IN_PROGRESS" in answer["message"], answer

        response = api.cancel(queued)
        assert response.status_code == 200, response.text
        assert response.json() == {"request_id": queued, "canceled": True, "message": response.json()["message"]}
        status = api.status(queued)
        assert status["status"] == "CANCELED", status
        assert [error["code"] for error in status["errors"]] == ["ASYNC_REQUEST_CANCELED"], status
        again = api.cancel(queued).json()
        assert again["canceled"] is False and "CANCELED" in again["message"], again
    assert api.wait(holder)["status"] == "SUCCEEDED"
    status = api.wait(queued)
    assert status["status"] == "CANCELED" and status["webhook_status"] == "SUCCEEDED", status
    [hook] = receiver.wait_for(path)
    body = check_webhook(hook, secret, queued)
    assert body["data"] is None
    assert [error["code"] for error in body["errors"]] == ["ASYNC_REQUEST_CANCELED"], body
    assert upstream.with_text(queued_text) == [], "a canceled request never reaches the model"
    finished = api.cancel(holder).json()
    assert finished["canceled"] is False and "SUCCEEDED" in finished["message"], finished


# --------------------------------------------------------------------------------------------
# Inference retries
# --------------------------------------------------------------------------------------------


def test_model_failing_twice_then_answering_succeeds_on_the_third_attempt(
    api: AsyncApi, upstream: RecordingUpstream, receiver: WebhookReceiver, secret: str
) -> None:
    key = tag("flaky")
    path = receiver.new_path()
    request_id = api.submit_ok(
        {
            "model_input": chat_input(f"[fail-times:2:{key}] please", model=UPSTREAM_MODEL),
            "webhook_endpoint": receiver.url(path),
            "inference_retry_config": {"max_attempts": 3, "initial_delay_ms": 200, "max_delay_ms": 400},
        }
    )
    status = api.wait(request_id)
    assert status["status"] == "SUCCEEDED", status
    attempts = status["attempts"]
    assert len(attempts) == 3, attempts
    assert [a["error"]["code"] if a["error"] else None for a in attempts] == [
        "MODEL_PREDICT_ERROR",
        "MODEL_PREDICT_ERROR",
        None,
    ], attempts
    # The backoff: the retry waited at least its delay after the failure (200 ms, then 400 ms).
    for before, after, delay in ((attempts[0], attempts[1], 0.2), (attempts[1], attempts[2], 0.4)):
        gap = parse_time(after["started_at"]) - parse_time(before["finished_at"])
        assert gap.total_seconds() >= delay - 0.01, attempts
    assert status["errors"] == [], "a request that succeeded in the end carries no error"
    assert len(upstream.with_text(key)) == 3
    [hook] = receiver.wait_for(path)
    body = check_webhook(hook, secret, request_id)
    assert body["data"] == {"output": status["output"]}


def test_model_failing_more_than_the_attempts_allow_fails(
    api: AsyncApi, upstream: RecordingUpstream, receiver: WebhookReceiver, secret: str
) -> None:
    key = tag("broken")
    path = receiver.new_path()
    request_id = api.submit_ok(
        {
            "model_input": chat_input(f"[fail-times:5:{key}] please", model=UPSTREAM_MODEL),
            "webhook_endpoint": receiver.url(path),
            "inference_retry_config": {"max_attempts": 2, "initial_delay_ms": 0, "max_delay_ms": 0},
        }
    )
    status = api.wait(request_id)
    assert status["status"] == "FAILED" and status["webhook_status"] == "SUCCEEDED", status
    assert len(status["attempts"]) == 2 and len(upstream.with_text(key)) == 2, status
    assert [error["code"] for error in status["errors"]] == ["MODEL_PREDICT_ERROR"], status
    [hook] = receiver.wait_for(path)
    body = check_webhook(hook, secret, request_id)
    assert body["data"] is None and [e["code"] for e in body["errors"]] == ["MODEL_PREDICT_ERROR"], body


# --------------------------------------------------------------------------------------------
# Webhook delivery: retries, failure, statuses that stop at once
# --------------------------------------------------------------------------------------------


def test_receiver_failing_then_recovering_gets_retries_with_one_webhook_id(
    api: AsyncApi, receiver: WebhookReceiver, secret: str
) -> None:
    path = receiver.new_path([500, 503])
    request_id = api.submit_ok({"model_input": chat_input("Retry me"), "webhook_endpoint": receiver.url(path)})
    status = api.wait(request_id, timeout=45)
    assert status["status"] == "SUCCEEDED" and status["webhook_status"] == "SUCCEEDED", status
    hooks = receiver.wait_for(path, 3)
    assert [hook.answered for hook in hooks] == [500, 503, 200]
    assert len({hook.headers["webhook-id"] for hook in hooks}) == 1, "every attempt carries the same webhook-id"
    assert hooks[0].headers["webhook-id"] == status["webhook"]["webhook_id"]
    for hook in hooks:
        body = check_webhook(hook, secret, request_id)
        assert body["data"] == {"output": status["output"]}
    # Retried on the configured schedule (1 s), not at once.
    assert all(later.at - earlier.at >= 0.9 for earlier, later in zip(hooks, hooks[1:])), [h.at for h in hooks]
    assert [a["status_code"] for a in status["webhook"]["attempts"]] == [500, 503, 200], status["webhook"]
    time.sleep(1.5)
    assert len(receiver.received(path)) == 3, "nothing more after a 2xx"


def test_receiver_always_failing_ends_webhook_failed_and_keeps_the_output(
    api: AsyncApi, receiver: WebhookReceiver, secret: str
) -> None:
    path = receiver.new_path([500] * (WEBHOOK_ATTEMPTS + 5))
    request_id = api.submit_ok({"model_input": chat_input("Keep me"), "webhook_endpoint": receiver.url(path)})
    status = api.wait(request_id, timeout=60)
    assert status["status"] == "WEBHOOK_FAILED" and status["webhook_status"] == "FAILED", status
    hooks = receiver.wait_for(path, WEBHOOK_ATTEMPTS)
    assert len(hooks) == WEBHOOK_ATTEMPTS, "one attempt and one per configured retry"
    assert len({hook.headers["webhook-id"] for hook in hooks}) == 1
    for hook in hooks:
        check_webhook(hook, secret, request_id)
    attempts = status["webhook"]["attempts"]
    assert [a["status_code"] for a in attempts] == [500] * WEBHOOK_ATTEMPTS, attempts
    assert status["webhook"]["next_attempt_at"] is None
    # Unlike Baseten, the output outlives the webhook.
    completion = openai.types.chat.ChatCompletion.model_validate(status["output"])
    assert completion.choices[0].message.content
    assert api.output(request_id).json() == status["output"]
    listed = api.list(status="WEBHOOK_FAILED", limit=100).json()
    assert request_id in {item["request_id"] for item in listed["data"]}
    time.sleep(1.5)
    assert len(receiver.received(path)) == WEBHOOK_ATTEMPTS, "no attempt after the schedule ran out"


@pytest.mark.parametrize("answer", [410, 302, 400])
def test_gone_redirect_or_client_error_stops_the_delivery_at_once(
    api: AsyncApi, receiver: WebhookReceiver, answer: int
) -> None:
    path = receiver.new_path([answer])
    request_id = api.submit_ok({"model_input": chat_input(f"Answered {answer}"), "webhook_endpoint": receiver.url(path)})
    status = api.wait(request_id, timeout=30)
    assert status["status"] == "WEBHOOK_FAILED" and status["webhook_status"] == "FAILED", status
    assert [a["status_code"] for a in status["webhook"]["attempts"]] == [answer], status["webhook"]
    time.sleep(1.5)
    assert len(receiver.received(path)) == 1
    assert receiver.received("/followed-a-redirect") == [], "redirects are not followed"
    assert status["output"]["object"] == "chat.completion"


# --------------------------------------------------------------------------------------------
# Unsafe webhook URLs
# --------------------------------------------------------------------------------------------

UNSAFE_URLS = [
    "https://10.0.0.1/x",  # RFC 1918
    "https://172.16.5.4/x",
    "https://192.168.1.10/x",
    "http://example.com/x",  # plain http off loopback
    "https://169.254.169.254/latest/meta-data/",  # the metadata address
    "https://[fd00:ec2::254]/",  # IPv6 metadata (unique local)
    "https://[fe80::1]/",  # link-local
    "https://[::ffff:169.254.169.254]/",  # IPv4-mapped metadata
    "https://100.64.0.1/x",  # CGNAT
    "https://0.0.0.0/x",
    "https://224.0.0.1/x",  # multicast
    "file:///etc/passwd",
    "ftp://example.com/x",
    "https://user:pass@example.com/x",
    "not a url",
    "//example.com/x",
]


@pytest.mark.parametrize("url", UNSAFE_URLS)
def test_unsafe_webhook_url_is_refused_at_submit(api: AsyncApi, url: str) -> None:
    response = api.submit({"model_input": chat_input("ssrf"), "webhook_endpoint": url})
    assert response.status_code == 400, (url, response.status_code, response.text)
    error = baseten_error(response)
    assert error["field"] == "webhook_endpoint", error
    assert error["code"] == "MODEL_INVALID_INPUT", error


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9/hook", "http://localhost:9/hook", "https://[::1]/", "https://127.0.0.1/x", "https://localhost/x"]
)
def test_loopback_webhook_is_refused_without_the_development_flag(
    keyed: tuple[kit.NimbusServer, dict[str, str]], url: str
) -> None:
    server, keys = keyed
    api = AsyncApi(server.base_url, keys[PROJECT_A])
    response = api.submit({"model_input": chat_input("loopback"), "webhook_endpoint": url})
    assert response.status_code == 400, (url, response.text)
    assert baseten_error(response)["field"] == "webhook_endpoint"


def test_loopback_webhook_is_accepted_on_a_development_server(api: AsyncApi, receiver: WebhookReceiver) -> None:
    """The other side of the flag: `nimbus serve` accepts its own machine's receivers."""
    for url in (receiver.url(receiver.new_path()), receiver.url(receiver.new_path()).replace("127.0.0.1", "localhost")):
        request_id = api.submit_ok({"model_input": chat_input("dev"), "webhook_endpoint": url})
        assert api.wait(request_id)["webhook_status"] == "SUCCEEDED"


# --------------------------------------------------------------------------------------------
# Projects, keys and Baseten's per-model URLs
# --------------------------------------------------------------------------------------------


def test_another_projects_request_is_404_everywhere(keyed: tuple[kit.NimbusServer, dict[str, str]]) -> None:
    server, keys = keyed
    owner, other = AsyncApi(server.base_url, keys[PROJECT_A]), AsyncApi(server.base_url, keys[PROJECT_B])
    request_id = owner.submit_ok({"model_input": chat_input("mine")})
    assert owner.wait(request_id)["status"] == "SUCCEEDED"
    for response in (
        other.get(request_id),
        other.get(request_id, prefix="/models/dummy"),
        other.cancel(request_id),
        other.cancel(request_id, prefix="/models/dummy"),
        other.output(request_id),
    ):
        assert response.status_code == 404, (response.request.method, response.request.url, response.text)
        assert baseten_error(response)["code"] == "ASYNC_REQUEST_NOT_FOUND"
    assert request_id not in {item["request_id"] for item in other.list(limit=100).json()["data"]}
    response = other.list(after=request_id)
    assert response.status_code == 404, response.text
    # The owner still sees it, unchanged by the other project's cancel.
    assert owner.status(request_id)["status"] == "SUCCEEDED"
    assert request_id in {item["request_id"] for item in owner.list(limit=100).json()["data"]}


def test_async_routes_need_a_key(keyed: tuple[kit.NimbusServer, dict[str, str]]) -> None:
    server, _ = keyed
    for api in (AsyncApi(server.base_url), AsyncApi(server.base_url, "nmb_not_a_key"), AsyncApi(server.base_url, "nmb_x", scheme="Api-Key")):
        response = api.submit({"model_input": chat_input("who")})
        assert response.status_code == 401, response.text
        assert baseten_error(response)["code"] == "UNAUTHORIZED"


def test_baseten_per_model_urls_with_api_key(keyed: tuple[kit.NimbusServer, dict[str, str]]) -> None:
    server, keys = keyed
    api = AsyncApi(server.base_url, keys[PROJECT_A], scheme="Api-Key")
    base = "/models/dummy"
    request_id = api.submit_ok({"model_input": {"messages": kit.user("Hi Baseten")}}, path=f"{base}/production/async_predict")
    second = api.submit_ok({"model_input": {"messages": kit.user("Hi again")}}, path=f"{base}/async_predict")
    for rid in (request_id, second):
        status = api.wait(rid)
        assert status["status"] == "SUCCEEDED" and status["model_id"] == "dummy", status
    response = api.get(request_id, prefix=base)
    assert response.status_code == 200 and response.json()["request_id"] == request_id, response.text
    assert api.get(request_id, prefix="/models/dummy-embedding").status_code == 404, "another model's URL"
    response = api.cancel(request_id, prefix=base)
    assert response.status_code == 200 and response.json()["canceled"] is False, response.text
    # `Bearer` works as well as `Api-Key`.
    bearer = AsyncApi(server.base_url, keys[PROJECT_A])
    assert bearer.get(request_id, prefix=base).status_code == 200
    # The model comes from the path: another one in model_input is refused, naming it.
    response = api.submit({"model_input": chat_input("mismatch", model="dummy-slow")}, path=f"{base}/async_predict")
    assert response.status_code == 400 and baseten_error(response)["field"] == "model_input.model", response.text
    response = api.submit({"model_input": {"messages": kit.user("x")}}, path="/models/no-such-model/async_predict")
    assert response.status_code == 400, response.text
    error = baseten_error(response)
    assert error["code"] == "MODEL_DOES_NOT_EXIST" and error["field"] == "model", error


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------

BAD_FIELDS: list[tuple[dict[str, Any], str, str]] = [
    ({"priority": 3}, "priority", "MODEL_INVALID_INPUT"),
    ({"priority": -1}, "priority", "MODEL_INVALID_INPUT"),
    ({"priority": "high"}, "priority", "MODEL_INVALID_INPUT"),
    ({"max_time_in_queue_seconds": 5}, "max_time_in_queue_seconds", "MODEL_INVALID_INPUT"),
    ({"max_time_in_queue_seconds": 259_201}, "max_time_in_queue_seconds", "MODEL_INVALID_INPUT"),
    ({"inference_retry_config": {"max_attempts": 11}}, "inference_retry_config.max_attempts", "MODEL_INVALID_INPUT"),
    ({"inference_retry_config": {"max_attempts": 0}}, "inference_retry_config.max_attempts", "MODEL_INVALID_INPUT"),
    ({"inference_retry_config": {"initial_delay_ms": 10_001}}, "inference_retry_config.initial_delay_ms", "MODEL_INVALID_INPUT"),
    ({"inference_retry_config": {"max_delay_ms": 60_001}}, "inference_retry_config.max_delay_ms", "MODEL_INVALID_INPUT"),
    ({"inference_retry_config": {"backoff": 2}}, "inference_retry_config.backoff", "MODEL_INVALID_INPUT"),
    ({"inference_retry_config": 3}, "inference_retry_config", "MODEL_INVALID_INPUT"),
    ({"model_input": chat_input("x", model="no-such-model")}, "model_input.model", "MODEL_DOES_NOT_EXIST"),
    ({"model_input": chat_input("x", stream=True)}, "model_input.stream", "MODEL_INVALID_INPUT"),
    ({"model_input": chat_input("x", temperature=9)}, "model_input.temperature", "MODEL_INVALID_INPUT"),
    ({"model_input": {"model": "dummy"}}, "model_input.messages", "MODEL_INVALID_INPUT"),
    ({"model_input": None}, "model_input", "MODEL_INVALID_INPUT"),
    ({"model_input": "hello"}, "model_input", "MODEL_INVALID_INPUT"),
    ({"webhook_endpoint": "http//missing-colon"}, "webhook_endpoint", "MODEL_INVALID_INPUT"),
    ({"webhook_endpoint": 42}, "webhook_endpoint", "MODEL_INVALID_INPUT"),
    ({"endpoint": "/v1/completions"}, "endpoint", "MODEL_INVALID_INPUT"),
    ({"callback": "https://example.com"}, "callback", "MODEL_INVALID_INPUT"),
]


@pytest.mark.parametrize(("changes", "field", "code"), BAD_FIELDS, ids=[f"{f}-{i}" for i, (_, f, _) in enumerate(BAD_FIELDS)])
def test_bad_field_is_a_400_naming_it(api: AsyncApi, changes: dict[str, Any], field: str, code: str) -> None:
    body = {"model_input": chat_input("bad"), **changes}
    before = api.list(limit=1).json()["first_id"]
    response = api.submit(body)
    assert response.status_code == 400, (changes, response.status_code, response.text)
    error = baseten_error(response)
    assert (error.get("field"), error["code"]) == (field, code), error
    assert api.list(limit=1).json()["first_id"] == before, "a refused request is not stored"


def test_malformed_json_and_oversized_bodies_are_4xx(api: AsyncApi) -> None:
    response = api.session.post(
        f"{api.base_url}/async_predict", data=b"{not json", headers={"content-type": "application/json"}, timeout=30
    )
    assert response.status_code == 400, response.text
    baseten_error(response)
    big = {"model_input": chat_input("x" * (300 * 1024))}
    response = api.submit(big)
    assert response.status_code == 413, response.status_code
    baseten_error(response)


# --------------------------------------------------------------------------------------------
# The other endpoints
# --------------------------------------------------------------------------------------------


def test_embeddings_endpoint(api: AsyncApi) -> None:
    request_id = api.submit_ok(
        {"endpoint": "/v1/embeddings", "model_input": {"model": "dummy-embedding", "input": ["one", "two"]}}
    )
    status = api.wait(request_id)
    assert status["status"] == "SUCCEEDED" and status["endpoint"] == "/v1/embeddings", status
    embeddings = openai.types.CreateEmbeddingResponse.model_validate(status["output"])
    assert [len(item.embedding) for item in embeddings.data] == [16, 16]
    response = api.submit({"endpoint": "/v1/embeddings", "model_input": {"model": "dummy-embedding"}})
    assert response.status_code == 400 and baseten_error(response)["field"] == "model_input.input", response.text


def test_inference_endpoint(api: AsyncApi) -> None:
    request_id = api.submit_ok(
        {"endpoint": "/inference", "model_input": {"model_name": "dummy", "input": {"messages": kit.user("TZ hi")}}}
    )
    status = api.wait(request_id)
    assert status["status"] == "SUCCEEDED" and status["endpoint"] == "/inference", status
    output = status["output"]
    assert {"inference_id", "episode_id", "variant_name", "content", "usage"} <= set(output), output
    assert output["content"] and output["content"][0]["type"] == "text", output
    # A function works as well, and its name is the request's model_id.
    email = {"system": {"sender_name": "Ada"}, "messages": [{"role": "user", "content": [{"type": "template", "name": "user", "arguments": {"recipient": "Bob", "topic": "lunch"}}]}]}
    request_id = api.submit_ok({"endpoint": "/inference", "model_input": {"function_name": "draft_email", "input": email}})
    status = api.wait(request_id)
    assert status["status"] == "SUCCEEDED" and status["model_id"] == "draft_email", status
    response = api.submit({"endpoint": "/inference", "model_input": {"function_name": "no_such_function", "input": {}}})
    assert response.status_code == 400, response.text
    assert baseten_error(response)["field"] == "model_input.function_name"
