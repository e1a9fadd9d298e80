"""Async inference on the AWS path: `nimbus-batches` (`/async_predict`, `/async_request/…`,
`/v1/webhook_secrets`), `nimbus-worker` fed SQS events from each priority queue, and `nimbus-poller`'s
scheduled event, under the Runtime Interface Emulator against their own moto (table, bucket, jobs
queue and the three priority queues). The tests play Lambda's SQS event sources (receive a priority
queue's message, wrap it in the event file of its job, invoke the worker, delete it unless reported
failed) and EventBridge's schedule (invoke the poller), driven by the event files
`batches-async-*.json`, `webhooks-secret-create.json` and `worker-sqs-async-*.json`.

Lambda never calls loopback webhooks, and these tests reach no other host: webhooks go to
`https://webhook.example.invalid/…`, a name that never resolves (RFC 6761), so every delivery attempt
fails and is recorded, which is what shows the poller bringing due retries back. The functions read
a config from S3 whose `[webhooks] retry_delays_s = [1, 1]` makes the retries due within seconds.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import nimbus_testkit as kit
from async_kit import with_webhook_retry_delays
from async_lambda_kit import DELIVER_EVENT, REQUEST_ID_PLACEHOLDER, RUN_EVENTS, Stack
from batch_lambda_kit import invoke_json, invoke_worker

UNREACHABLE_WEBHOOK = "https://webhook.example.invalid/hooks/nimbus"
RETRY_DELAYS_S = [1, 1]  # three delivery attempts in all
ASYNC_HTTP_EVENTS = [path.name for path in kit.event_files("batches-async-*.json")]
# The webhook secret events the async flow uses (all webhook events: test_webhooks_lambda_events.py).
SECRET_CREATE_EVENT = "webhooks-secret-create.json"
SECRET_LIST_EVENT = "webhooks-secret-list.json"


# --------------------------------------------------------------------------------------------
# The stack: own moto, the three functions with a config from S3, two projects' keys
# --------------------------------------------------------------------------------------------


def async_config() -> str:
    return with_webhook_retry_delays(kit.DEFAULT_CONFIG.read_text(), RETRY_DELAYS_S)


@pytest.fixture(scope="module")
def stack(logs_dir: Path, batch_lambda_factory: Callable[..., kit.LambdaUnderRie]) -> Iterator[Stack]:
    moto = kit.MotoServer(logs_dir)
    try:
        moto.create_resources()
        source = moto.put_config("async-lambda", async_config())
        options = {"moto": moto, "extra_env": {"NIMBUS_CONFIG_SOURCE": source}}
        batches = batch_lambda_factory(
            "NimbusBatchesFunction", "nimbus-batches", memory="256", timeout="30", name="rie-async-batches", **options
        )
        worker = batch_lambda_factory(
            "NimbusWorkerFunction", "nimbus-worker", memory="512", timeout="300", name="rie-async-worker", **options
        )
        poller = batch_lambda_factory(
            "NimbusPollerFunction", "nimbus-poller", memory="256", timeout="300", name="rie-async-poller", **options
        )
        cli = kit.NimbusCli(kit.clean_env(moto.aws_env()), backend="aws")
        api_key = cli.create_key("async-lambda", name="async-lambda-tests")["api_key"]
        other_key = cli.create_key("async-lambda-other", name="async-lambda-other")["api_key"]
        yield Stack(moto, batches, worker, poller, api_key, other_key)
    finally:
        moto.stop()


@pytest.fixture(scope="module")
def secret(stack: Stack) -> str:
    """The project's webhook secret, created with the event file (the worker signs with it)."""
    status, created = invoke_json(stack.batches, stack.event(SECRET_CREATE_EVENT))
    assert status == 200, created
    assert created["object"] == "webhook_secret" and created["secret"].startswith("whsec_"), created
    return created["secret"]


# --------------------------------------------------------------------------------------------
# The event files
# --------------------------------------------------------------------------------------------


def test_async_event_files_have_one_per_route() -> None:
    routes = {(kit.load_event(name)["requestContext"]["http"]["method"], kit.load_event(name)["rawPath"]) for name in ASYNC_HTTP_EVENTS}
    assert routes == {
        ("POST", "/async_predict"),
        ("POST", "/models/dummy/production/async_predict"),
        ("GET", f"/async_request/{REQUEST_ID_PLACEHOLDER}"),
        ("DELETE", f"/async_request/{REQUEST_ID_PLACEHOLDER}"),
        ("GET", "/async_requests"),
    }, routes


@pytest.mark.parametrize("name", ASYNC_HTTP_EVENTS)
def test_async_event_is_well_formed(name: str) -> None:
    event = kit.load_event(name)
    headers = event["headers"]
    assert event["version"] == "2.0" and event["routeKey"] == "$default"
    assert all(h == h.lower() for h in headers)
    # Baseten's `Api-Key` scheme on the per-model URL, `Bearer` elsewhere.
    scheme = "Api-Key" if event["rawPath"].startswith("/models/") else "Bearer"
    assert headers["authorization"] == f"{scheme} {kit.PLACEHOLDER_KEY}"
    context = event["requestContext"]
    assert context["http"]["path"] == event["rawPath"]
    query = event.get("queryStringParameters") or {}
    assert event["rawQueryString"] == "&".join(f"{k}={v}" for k, v in query.items())
    if event.get("body"):
        assert headers["content-length"] == str(len(event["body"].encode()))
        assert headers["content-type"] == "application/json"
        body = json.loads(event["body"])
        assert body["webhook_endpoint"].startswith("https://") and ".invalid/" in body["webhook_endpoint"], (
            "the sample webhook must reach no real host"
        )
    else:
        assert "content-length" not in headers


@pytest.mark.parametrize("name", [*RUN_EVENTS.values(), DELIVER_EVENT])
def test_worker_event_file_runs_a_real_request(stack: Stack, name: str) -> None:
    """Each `worker-sqs-async-*.json` file with a real request id in place of the placeholder: the
    run event runs it; the deliver event makes the first webhook attempt of a canceled request."""
    if name == DELIVER_EVENT:
        request_id = stack.submit_ok(priority=1)
        stack.drop_job(1, request_id)  # its async_run message: never run
        code, canceled = stack.cancel(request_id)
        assert code == 200 and canceled["canceled"] is True, canceled
        stack.drop_job(1, request_id)  # the deliver job the cancel queued: the event file stands in
    else:
        request_id = stack.submit_ok(priority=int(name[-6]), webhook_endpoint=None)
    event = kit.replace_strings(kit.load_event(name), REQUEST_ID_PLACEHOLDER, request_id)
    for record in event["Records"]:
        record["md5OfBody"] = hashlib.md5(record["body"].encode()).hexdigest()  # noqa: S324 - what SQS sends
    assert invoke_worker(stack.worker, event) == set()
    status = stack.status_ok(request_id)
    if name == DELIVER_EVENT:
        assert status["status"] == "CANCELED" and len(status["webhook"]["attempts"]) == 1, status
        assert status["webhook"]["attempts"][0]["status_code"] is None, "webhook.example.invalid never answers"
    else:
        assert status["status"] == "SUCCEEDED" and status["output"]["object"] == "chat.completion", status


@pytest.mark.parametrize("name", [*RUN_EVENTS.values(), DELIVER_EVENT])
def test_worker_drops_a_job_of_an_unknown_request(stack: Stack, name: str) -> None:
    event = kit.replace_strings(kit.load_event(name), REQUEST_ID_PLACEHOLDER, uuid.uuid4().hex)
    assert invoke_worker(stack.worker, event) == set(), "a job of no request must not loop through the queue"


# --------------------------------------------------------------------------------------------
# Requests through the priority queues
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", [0, 1, 2])
def test_each_priority_queue_feeds_the_worker(stack: Stack, secret: str, level: int) -> None:
    request_id = stack.submit_ok(priority=level, webhook_endpoint=None)
    assert stack.status_ok(request_id)["status"] == "QUEUED"
    for other in {0, 1, 2} - {level}:
        assert stack.jobs_waiting(other, request_id) == [], f"a job in priority queue {other}"
    job = stack.run_job(level, request_id)
    assert job == {"job": "async_run", "request_id": request_id}
    status = stack.status_ok(request_id)
    assert status["status"] == "SUCCEEDED" and status["priority"] == level, status
    assert status["webhook_status"] == "NO_WEBHOOK_PROVIDED"
    assert status["output"]["choices"][0]["message"]["content"], status
    # The output object is in the bucket, under the project's async prefix.
    listed = stack.moto.client("s3").list_objects_v2(Bucket=stack.moto.bucket, Prefix="async/")
    assert any(request_id in obj["Key"] for obj in listed.get("Contents", [])), listed
    # A duplicate delivery of the same job is a no-op (the request is final).
    code, again = stack.status(request_id)
    assert code == 200 and again["attempts"] == status["attempts"]


def test_due_webhook_retries_are_brought_back_by_the_poller(stack: Stack, secret: str) -> None:
    request_id = stack.submit_ok(priority=1, webhook_endpoint=UNREACHABLE_WEBHOOK)
    stack.run_job(1, request_id)
    status = stack.status_ok(request_id)
    # The model answered; the first delivery attempt failed (no such host) and a retry is due in 1 s.
    assert status["status"] == "SUCCEEDED" and status["webhook_status"] == "PENDING", status
    [first] = status["webhook"]["attempts"]
    assert first["status_code"] is None and first["error"], first
    assert status["webhook"]["next_attempt_at"], status
    # Its delayed deliver message is lost: only the poller's scheduled pass can bring the retry back.
    assert stack.drop_job(1, request_id) == {"job": "async_deliver", "request_id": request_id, "attempt": 2}
    for attempt in (2, 3):
        deadline = time.monotonic() + 20
        while True:
            report = stack.poll()
            if stack.jobs_waiting(1, request_id):
                break
            assert time.monotonic() < deadline, f"the poller queued no retry: {report}"
            time.sleep(0.5)
        assert report["tasks"]["async_requests"]["deliveries_queued"] >= 1, report
        job = stack.run_job(1, request_id)
        assert job == {"job": "async_deliver", "request_id": request_id, "attempt": attempt}
        if attempt == 2:
            # The worker also queued attempt 3 with a delay: lose it too.
            stack.drop_job(1, request_id)
    status = stack.status_ok(request_id)
    assert status["status"] == "WEBHOOK_FAILED" and status["webhook_status"] == "FAILED", status
    attempts = status["webhook"]["attempts"]
    assert len(attempts) == len(RETRY_DELAYS_S) + 1 and all(a["status_code"] is None for a in attempts), attempts
    # The output outlives the webhook.
    assert status["output"]["object"] == "chat.completion", status
    stack.poll()
    assert stack.jobs_waiting(1, request_id) == [], "nothing left to deliver"


def test_request_left_in_the_queue_is_expired_by_the_poller(stack: Stack, secret: str) -> None:
    request_id = stack.submit_ok(priority=2, max_time_in_queue_seconds=10)
    job = stack.receive_job(2, request_id)  # taken by an event source that never runs it (yet)
    time.sleep(10.5)
    report = stack.poll()
    assert report["tasks"]["async_requests"]["expired"] >= 1, report
    status = stack.status_ok(request_id)
    assert status["status"] == "EXPIRED", status
    assert [e["code"] for e in status["errors"]] == ["ASYNC_REQUEST_EXPIRED"], status
    # Its webhook job is queued at its priority; the late run job is dropped without a model call.
    assert stack.jobs_waiting(2, request_id) == [{"job": "async_deliver", "request_id": request_id, "attempt": 1}]
    assert stack.deliver(2, job)
    status = stack.status_ok(request_id)
    assert status["status"] == "EXPIRED" and status["attempts"] == [], status
    stack.run_job(2, request_id)
    attempts = stack.status_ok(request_id)["webhook"]["attempts"]
    assert len(attempts) == 1 and attempts[0]["status_code"] is None, attempts


def test_cancel_and_tenant_isolation_through_the_function(stack: Stack) -> None:
    request_id = stack.submit_ok(webhook_endpoint=None)
    for code, body in (stack.status(request_id, key=stack.other_key), stack.cancel(request_id, key=stack.other_key)):
        assert code == 404 and body["code"] == "ASYNC_REQUEST_NOT_FOUND", body
    code, canceled = stack.cancel(request_id)
    assert code == 200 and canceled == {"request_id": request_id, "canceled": True, "message": canceled["message"]}
    job = stack.receive_job(0, request_id)
    assert stack.deliver(0, job), "a canceled request's job is dropped, not retried"
    status = stack.status_ok(request_id)
    assert status["status"] == "CANCELED" and status["attempts"] == [], status
    code, listing = invoke_json(stack.batches, stack.event("batches-async-requests-list.json"))
    assert code == 200 and listing["object"] == "list", listing
    assert all(item["status"] == "SUCCEEDED" for item in listing["data"]), listing


def test_per_model_url_with_api_key(stack: Stack) -> None:
    request_id = stack.submit_ok("batches-async-predict-model.json", webhook_endpoint=None)
    stack.run_job(1, request_id)  # Baseten's default priority is 1
    status = stack.status_ok(request_id)
    assert status["status"] == "SUCCEEDED" and status["model_id"] == "dummy", status


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9/hook", "https://localhost/hook", "https://[::1]/", "https://10.1.2.3/hook", "http://example.com/x"]
)
def test_lambda_refuses_loopback_and_private_webhooks(stack: Stack, url: str) -> None:
    status, body = stack.submit(webhook_endpoint=url)
    assert status == 400, body
    assert body["field"] == "webhook_endpoint" and body["code"] == "MODEL_INVALID_INPUT", body


def test_secrets_list_event_masks_the_secret(stack: Stack, secret: str) -> None:
    status, listing = invoke_json(stack.batches, stack.event(SECRET_LIST_EVENT))
    assert status == 200 and listing["object"] == "list", listing
    assert listing["data"] and all(secret not in json.dumps(item) for item in listing["data"]), listing

