"""The Batch API on its AWS path: `nimbus-batches`, `nimbus-worker` and `nimbus-poller` under the
Runtime Interface Emulator, with their state, bytes and jobs in moto, driven by the
`infra/events/batches-*.json`, `worker-*.json` and `poller-*.json` event files.

Moto runs no Lambda triggers, so the tests play both AWS services that start the functions:
- the SQS event source: receive the jobs queue's messages (boto3), wrap each in an SQS event shaped
  like `worker-sqs-validate.json` / `worker-sqs-chunk.json` (one record: the template's BatchSize is
  1), invoke the worker, and delete the messages it did not report in `batchItemFailures`;
- the EventBridge schedule: invoke the poller with `poller-scheduled.json` whenever the queue is idle.

Input files are uploaded and results downloaded through the files Lambda (`files-create.json`,
`files-content.json`). The placeholder bearer is replaced by a key of project `demo`.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
import requests

import nimbus_testkit as kit

PROJECT = "demo"
FILE_ID_PLACEHOLDER = "file-REPLACE_WITH_FILE_ID"
BATCH_ID_PLACEHOLDER = "batch_REPLACE_WITH_BATCH_ID"
HTTP_EVENT_NAMES = [path.name for path in kit.event_files("batches-*.json")]
WORKER_EVENT_NAMES = [path.name for path in kit.event_files("worker-*.json")]
POLLER_EVENT_NAMES = [path.name for path in kit.event_files("poller-*.json")]
EVENT_NAMES = HTTP_EVENT_NAMES + WORKER_EVENT_NAMES + POLLER_EVENT_NAMES
NEEDS_BATCH_ID = {"batches-retrieve.json", "batches-cancel.json"}
TERMINAL = kit.BATCH_TERMINAL_STATUSES
BATCH_KEYS = kit.BATCH_KEYS
WORKER_TIMEOUT_S = 300  # template.yaml: NimbusWorkerFunction Timeout
CHUNK_LINES = 3  # lines_per_chunk of the worker that runs multi-chunk batches

# What each event file produces as it is (placeholders left in); every event file needs an entry.
EXPECTED: dict[str, str] = {
    "batches-create.json": "401",
    "batches-list.json": "401",
    "batches-retrieve.json": "401",
    "batches-cancel.json": "401",
    "worker-sqs-validate.json": "no failure reported (unknown batch: the job is dropped)",
    "worker-sqs-chunk.json": "no failure reported (unknown batch: the job is dropped)",
    "poller-scheduled.json": "a JSON report",
}


# --------------------------------------------------------------------------------------------
# Requests to the functions
# --------------------------------------------------------------------------------------------


def invoke(function: kit.LambdaUnderRie, event: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    """Invoke an HTTP function; return status, lower-cased headers and body bytes."""
    result = function.invoke(event)
    assert isinstance(result, dict) and isinstance(result.get("statusCode"), int), result
    body = result.get("body") or ""
    raw = base64.b64decode(body) if result.get("isBase64Encoded") else body.encode()
    return result["statusCode"], kit.response_headers(result), raw


def invoke_json(function: kit.LambdaUnderRie, event: dict[str, Any]) -> tuple[int, Any]:
    status, headers, raw = invoke(function, event)
    assert headers.get("content-type", "").startswith("application/json"), (status, headers, raw[:300])
    return status, json.loads(raw)


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line, separators=(",", ":")).encode() + b"\n" for line in lines)


def chat_line(custom_id: str, text: str = "Hello", *, model: str = "dummy") -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": model, "messages": kit.user(text), "max_tokens": 16},
    }


def parse_jsonl(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in raw.decode().splitlines() if line.strip()]


def queue_arn(moto: kit.MotoServer) -> str:
    attributes = moto.client("sqs").get_queue_attributes(QueueUrl=moto.queue_url, AttributeNames=["QueueArn"])
    return attributes["Attributes"]["QueueArn"]


def sqs_event(message: dict[str, Any], arn: str) -> dict[str, Any]:
    """The event Lambda's SQS event source would send for one received message, built from the
    event file of the message's job kind (so the files are the shape the worker is tested with)."""
    try:
        job = json.loads(message["Body"]).get("job")
    except ValueError:
        job = None
    event = kit.load_event("worker-sqs-validate.json" if job == "validate" else "worker-sqs-chunk.json")
    record = event["Records"][0]
    attributes = dict(record["attributes"])
    attributes.update({k: v for k, v in (message.get("Attributes") or {}).items() if k in attributes})
    record.update(
        {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "md5OfBody": message["MD5OfBody"],
            "attributes": attributes,
            "eventSourceARN": arn,
        }
    )
    return event


def replaced_worker_event(name: str, batch_id: str) -> dict[str, Any]:
    """A worker event file with the placeholder batch id replaced (and md5OfBody kept true)."""
    event = kit.replace_strings(kit.load_event(name), BATCH_ID_PLACEHOLDER, batch_id)
    for record in event["Records"]:
        record["md5OfBody"] = hashlib.md5(record["body"].encode()).hexdigest()  # noqa: S324 - what SQS sends
    return event


def invoke_worker(worker: kit.LambdaUnderRie, event: dict[str, Any]) -> set[str]:
    """Invoke the worker with an SQS event; return the message ids it reported as failures."""
    result = worker.invoke(event, timeout=WORKER_TIMEOUT_S + 30)
    assert isinstance(result, dict) and set(result) == {"batchItemFailures"}, f"not an SqsBatchResponse: {result!r}"
    failures = {failure["itemIdentifier"] for failure in result["batchItemFailures"]}
    assert failures <= {record["messageId"] for record in event["Records"]}, result
    return failures


def invoke_poller(poller: kit.LambdaUnderRie) -> dict[str, Any]:
    report = poller.invoke(kit.load_event("poller-scheduled.json"), timeout=WORKER_TIMEOUT_S + 30)
    assert isinstance(report, dict), f"the poller's result is not a JSON object: {report!r}"
    return report


# --------------------------------------------------------------------------------------------
# The AWS services that start the worker and the poller
# --------------------------------------------------------------------------------------------


@dataclass
class Delivery:
    job: dict[str, Any]
    message_id: str
    failed: bool


@dataclass
class EventSource:
    """Plays Lambda's SQS event source for the worker (BatchSize 1, ReportBatchItemFailures) and
    EventBridge's schedule for the poller."""

    moto: kit.MotoServer
    worker: kit.LambdaUnderRie
    poller: kit.LambdaUnderRie
    deliveries: list[Delivery] = field(default_factory=list)
    poll_reports: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sqs = self.moto.client("sqs")
        self.arn = queue_arn(self.moto)

    def receive(self, max_messages: int = 10) -> list[dict[str, Any]]:
        return self.sqs.receive_message(
            QueueUrl=self.moto.queue_url,
            MaxNumberOfMessages=max_messages,
            WaitTimeSeconds=0,
            AttributeNames=["All"],
        ).get("Messages", [])

    def release(self, messages: list[dict[str, Any]]) -> None:
        """Make received messages visible again at once (received, but not for us to deliver now)."""
        for message in messages:
            self.sqs.change_message_visibility(
                QueueUrl=self.moto.queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
            )

    def deliver(self, message: dict[str, Any]) -> bool:
        """Hand one message to the worker; delete it unless reported failed. True = succeeded."""
        failures = invoke_worker(self.worker, sqs_event(message, self.arn))
        failed = message["MessageId"] in failures
        self.deliveries.append(Delivery(json.loads(message["Body"]), message["MessageId"], failed))
        if not failed:
            self.sqs.delete_message(QueueUrl=self.moto.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return not failed

    def pump(self) -> int:
        """Deliver what the queue has now; return how many messages were delivered."""
        messages = self.receive()
        for message in messages:
            self.deliver(message)
        return len(messages)

    def poll(self) -> dict[str, Any]:
        report = invoke_poller(self.poller)
        self.poll_reports.append(report)
        return report

    def jobs_for(self, batch_id: str) -> list[Delivery]:
        return [d for d in self.deliveries if d.job.get("batch_id") == batch_id]


@dataclass
class Api:
    """The HTTP side: the files and batches functions with one project's key."""

    files: kit.LambdaUnderRie
    batches: kit.LambdaUnderRie
    api_key: str

    def event(self, name: str, *, file_id: str | None = None, batch_id: str | None = None) -> dict[str, Any]:
        event = kit.with_api_key(kit.load_event(name), self.api_key)
        if file_id is not None:
            event = kit.replace_strings(event, FILE_ID_PLACEHOLDER, file_id)
        if batch_id is not None:
            event = kit.replace_strings(event, BATCH_ID_PLACEHOLDER, batch_id)
        return event

    def upload(self, content: bytes, *, filename: str = "batch-input.jsonl", purpose: str = "batch") -> dict[str, Any]:
        body, content_type = kit.multipart_body(
            [("purpose", purpose), ("file", (filename, content, "application/octet-stream"))]
        )
        event = self.event("files-create.json")
        event["headers"]["content-type"] = content_type
        event["headers"]["content-length"] = str(len(body))
        event["body"] = base64.b64encode(body).decode()
        event["isBase64Encoded"] = True
        status, file = invoke_json(self.files, event)
        assert status == 200, file
        return file

    def create(self, file_id: str, **changes: Any) -> tuple[int, Any]:
        event = self.event("batches-create.json", file_id=file_id)
        if changes:
            body = {**json.loads(event["body"]), **changes}
            event = kit.with_body(event, {k: v for k, v in body.items() if v is not None})
        return invoke_json(self.batches, event)

    def create_ok(self, file_id: str, **changes: Any) -> dict[str, Any]:
        status, batch = self.create(file_id, **changes)
        assert status == 200, batch
        return batch

    def retrieve(self, batch_id: str) -> dict[str, Any]:
        status, batch = invoke_json(self.batches, self.event("batches-retrieve.json", batch_id=batch_id))
        assert status == 200, batch
        return batch

    def cancel(self, batch_id: str) -> tuple[int, Any]:
        return invoke_json(self.batches, self.event("batches-cancel.json", batch_id=batch_id))

    def file_content(self, file_id: str) -> bytes:
        status, _, body = invoke(self.files, self.event("files-content.json", file_id=file_id))
        assert status == 200, body[:300]
        return body

    def file(self, file_id: str) -> dict[str, Any]:
        status, file = invoke_json(self.files, self.event("files-retrieve.json", file_id=file_id))
        assert status == 200, file
        return file

    def results(self, batch: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        def lines(file_id: str | None) -> list[dict[str, Any]]:
            return parse_jsonl(self.file_content(file_id)) if file_id else []

        return lines(batch["output_file_id"]), lines(batch["error_file_id"])


def run_until(
    api: Api,
    source: EventSource,
    batch_id: str,
    *,
    until: Callable[[dict[str, Any]], bool] | None = None,
    timeout: float = 180.0,
) -> dict[str, Any]:
    """Deliver queued jobs and run the poller whenever the queue is idle, until the batch satisfies
    `until` (default: a terminal status). Returns the batch; fails with the last one seen."""
    until = until or (lambda batch: batch["status"] in TERMINAL)
    deadline = time.monotonic() + timeout
    while True:
        batch = api.retrieve(batch_id)
        if until(batch):
            return batch
        if time.monotonic() > deadline:
            raise AssertionError(
                f"batch {batch_id} not done within {timeout:.0f}s; last: {batch!r}; "
                f"jobs delivered: {[(d.job, d.failed) for d in source.jobs_for(batch_id)]}; "
                f"last poll report: {source.poll_reports[-1:]!r}"
            )
        if source.pump() == 0:
            source.poll()
            time.sleep(0.3)


# --------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------


def check_batch(batch: dict[str, Any]) -> None:
    assert set(batch) == BATCH_KEYS, f"keys: {sorted(set(batch) ^ BATCH_KEYS)}: {batch!r}"
    assert batch["object"] == "batch"
    assert re.fullmatch(r"batch_[A-Za-z0-9_-]+", batch["id"]), batch["id"]
    assert set(batch["request_counts"]) == {"total", "completed", "failed"}


def check_output_line(line: dict[str, Any], endpoint_object: str = "chat.completion") -> None:
    assert set(line) == {"id", "custom_id", "response", "error"}, line
    assert line["id"].startswith("batch_req_"), line
    assert line["error"] is None, line
    response = line["response"]
    assert response["status_code"] == 200, line
    assert isinstance(response["request_id"], str) and response["request_id"], line
    assert response["body"]["object"] == endpoint_object, line


def check_results(
    api: Api, batch: dict[str, Any], *, succeeded: set[str], failed: set[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The finished batch's counts and files: each custom id exactly once, in the right file."""
    assert batch["status"] == "completed", batch
    assert batch["errors"] is None, batch
    assert batch["request_counts"] == {
        "total": len(succeeded) + len(failed),
        "completed": len(succeeded),
        "failed": len(failed),
    }, batch
    for stamp in ("in_progress_at", "finalizing_at", "completed_at"):
        assert isinstance(batch[stamp], int), (stamp, batch)
    assert batch["created_at"] <= batch["in_progress_at"] <= batch["finalizing_at"] <= batch["completed_at"], batch
    output, errors = api.results(batch)
    out_ids = Counter(line["custom_id"] for line in output)
    err_ids = Counter(line["custom_id"] for line in errors)
    assert out_ids == Counter(succeeded), f"output custom ids: {out_ids}"
    assert err_ids == Counter(failed), f"error custom ids: {err_ids}"
    for line in output:
        check_output_line(line)
    for line in errors:
        assert line["id"].startswith("batch_req_"), line
        assert line["error"] is None, line
        assert line["response"]["status_code"] == 502, line
        assert set(line["response"]["body"]["error"]) >= {"message", "type", "param", "code"}, line
    ids = [line["id"] for line in output + errors]
    assert len(ids) == len(set(ids)), "request ids repeat"
    if succeeded:
        assert batch["output_file_id"], batch
        out_file = api.file(batch["output_file_id"])
        assert out_file["purpose"] == "batch_output"
        assert out_file["filename"].endswith("_output.jsonl") and batch["id"] in out_file["filename"], out_file
    else:
        assert batch["output_file_id"] is None, batch
    if failed:
        err_file = api.file(batch["error_file_id"])
        assert err_file["purpose"] == "batch_output"
        assert err_file["filename"].endswith("_error.jsonl") and batch["id"] in err_file["filename"], err_file
    else:
        assert batch["error_file_id"] is None, batch
    usage = batch["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"], usage
    if succeeded:
        assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0, usage
    return output, errors


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api(files_lambda: kit.LambdaUnderRie, batches_lambda: kit.LambdaUnderRie, aws_api_key: dict[str, Any]) -> Api:
    return Api(files_lambda, batches_lambda, aws_api_key["api_key"])


@pytest.fixture(scope="module")
def source(moto: kit.MotoServer, worker_lambda: kit.LambdaUnderRie, poller_lambda: kit.LambdaUnderRie) -> EventSource:
    return EventSource(moto, worker_lambda, poller_lambda)


def config_with_batches(**settings: int) -> str:
    """The default config with these `[batches]` settings."""
    text = kit.DEFAULT_CONFIG.read_text()
    lines = "".join(f"{name} = {value}\n" for name, value in settings.items())
    if re.search(r"(?m)^\[batches\]\s*$", text):
        for name in settings:
            text = re.sub(rf"(?m)^{name}\s*=.*$\n?", "", text)
        return re.sub(r"(?m)^\[batches\]\s*$\n?", f"[batches]\n{lines}", text, count=1)
    return f"{text.rstrip()}\n\n[batches]\n{lines}"


def worker_with_config(
    moto: kit.MotoServer, start: Callable[..., kit.LambdaUnderRie], name: str, config: str, *, timeout: int
) -> kit.LambdaUnderRie:
    """A worker whose config is read from S3 (as with ConfigSource=s3://…), with its own timeout."""
    key = f"config/{name}.toml"
    moto.client("s3").put_object(Bucket=moto.bucket, Key=key, Body=config.encode())
    return start(
        "NimbusWorkerFunction",
        "nimbus-worker",
        memory="512",
        timeout=str(timeout),
        name=f"rie-{name}",
        extra_env={"NIMBUS_CONFIG_SOURCE": f"s3://{moto.bucket}/{key}"},
    )


@pytest.fixture(scope="module")
def chunky_source(
    moto: kit.MotoServer, batch_lambda_factory: Callable[..., kit.LambdaUnderRie], poller_lambda: kit.LambdaUnderRie
) -> EventSource:
    """A second worker, whose config (read from S3, as ConfigSource=s3://… does) splits inputs into
    chunks of CHUNK_LINES lines; the same queue and poller."""
    config = config_with_batches(lines_per_chunk=CHUNK_LINES)
    worker = worker_with_config(moto, batch_lambda_factory, "worker-chunks", config, timeout=WORKER_TIMEOUT_S)
    return EventSource(moto, worker, poller_lambda)


@pytest.fixture(scope="module")
def short_lived_source(
    moto: kit.MotoServer, batch_lambda_factory: Callable[..., kit.LambdaUnderRie], poller_lambda: kit.LambdaUnderRie
) -> EventSource:
    """A worker with a 32 s timeout (no line starts in the last 30 s of an invocation) running one
    line at a time: a chunk of slow lines needs several invocations."""
    config = config_with_batches(line_concurrency=1)
    worker = worker_with_config(moto, batch_lambda_factory, "worker-short", config, timeout=32)
    return EventSource(moto, worker, poller_lambda)


# --------------------------------------------------------------------------------------------
# The event files themselves (no processes needed)
# --------------------------------------------------------------------------------------------


def test_every_batch_event_has_an_expectation() -> None:
    assert set(EVENT_NAMES) == set(EXPECTED), (
        f"missing event files: {sorted(set(EXPECTED) - set(EVENT_NAMES))}; "
        f"event files without expectations here: {sorted(set(EVENT_NAMES) - set(EXPECTED))}"
    )


@pytest.mark.parametrize("name", HTTP_EVENT_NAMES)
def test_batches_event_is_well_formed(name: str) -> None:
    event = kit.load_event(name)
    headers, context = kit.check_http_api_event(event)
    assert event["rawPath"].startswith("/v1/batches")
    assert (BATCH_ID_PLACEHOLDER in event["rawPath"]) is (name in NEEDS_BATCH_ID)
    assert event["isBase64Encoded"] is False
    if event.get("body"):
        assert context["http"]["method"] == "POST"
        assert headers["content-type"] == "application/json"
        assert headers["content-length"] == str(len(event["body"].encode()))
        body = json.loads(event["body"])
        assert body["input_file_id"] == FILE_ID_PLACEHOLDER
    else:
        assert "content-length" not in headers


@pytest.mark.parametrize("name", WORKER_EVENT_NAMES)
def test_worker_event_is_well_formed(name: str) -> None:
    event = kit.load_event(name)
    assert set(event) == {"Records"} and len(event["Records"]) == 1, "BatchSize is 1"
    record = event["Records"][0]
    assert record["eventSource"] == "aws:sqs"
    assert record["eventSourceARN"].startswith("arn:aws:sqs:")
    assert record["messageId"] and record["receiptHandle"]
    assert record["md5OfBody"] == hashlib.md5(record["body"].encode()).hexdigest()  # noqa: S324
    assert int(record["attributes"]["ApproximateReceiveCount"]) >= 1
    job = json.loads(record["body"])
    assert job["batch_id"] == BATCH_ID_PLACEHOLDER
    expected = {"worker-sqs-chunk.json": {"job", "batch_id", "chunk"}, "worker-sqs-validate.json": {"job", "batch_id"}}
    assert set(job) == expected[name]
    assert job["job"] == name.removeprefix("worker-sqs-").removesuffix(".json")


@pytest.mark.parametrize("name", POLLER_EVENT_NAMES)
def test_poller_event_is_well_formed(name: str) -> None:
    event = kit.load_event(name)
    assert event["detail-type"] == "Scheduled Event"
    assert event["source"] == "aws.events"
    assert all(arn.startswith("arn:aws:events:") for arn in event["resources"])


# --------------------------------------------------------------------------------------------
# Each event file, as it is (placeholders left in)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", HTTP_EVENT_NAMES)
def test_placeholder_key_is_rejected(batches_lambda: kit.LambdaUnderRie, name: str) -> None:
    status, body = invoke_json(batches_lambda, kit.load_event(name))
    assert status == 401, f"{name}: HTTP {status}: {body}"
    assert body["error"]["code"] == "invalid_api_key", body


def test_missing_authorization_is_rejected(batches_lambda: kit.LambdaUnderRie) -> None:
    status, body = invoke_json(batches_lambda, kit.without_authorization(kit.load_event("batches-list.json")))
    assert status == 401, body


@pytest.mark.parametrize("name", WORKER_EVENT_NAMES)
def test_worker_drops_a_job_of_an_unknown_batch(worker_lambda: kit.LambdaUnderRie, name: str) -> None:
    assert invoke_worker(worker_lambda, kit.load_event(name)) == set(), "a job of no batch must not be retried"


@pytest.mark.parametrize("name", POLLER_EVENT_NAMES)
def test_poller_event_returns_a_report(poller_lambda: kit.LambdaUnderRie, name: str) -> None:
    report = poller_lambda.invoke(kit.load_event(name), timeout=WORKER_TIMEOUT_S + 30)
    assert isinstance(report, dict) and report, f"not a JSON report: {report!r}"
    assert all(isinstance(count, int) and count >= 0 for count in report.values()), report
    assert report.get("errors", 0) == 0, report


def test_worker_answers_each_record(worker_lambda: kit.LambdaUnderRie) -> None:
    """Two records in one event (as with a BatchSize above 1): both jobs of unknown batches, dropped."""
    first = replaced_worker_event("worker-sqs-chunk.json", "batch_unknown1")
    second = replaced_worker_event("worker-sqs-validate.json", "batch_unknown2")
    second["Records"][0]["messageId"] = "6a0b7c1d-0000-4000-8000-000000000002"
    event = {"Records": first["Records"] + second["Records"]}
    assert invoke_worker(worker_lambda, event) == set()


# --------------------------------------------------------------------------------------------
# The HTTP events with real ids
# --------------------------------------------------------------------------------------------


def test_create_retrieve_list_events(api: Api) -> None:
    file = api.upload(jsonl([chat_line("only")]))
    batch = api.create_ok(file["id"])
    check_batch(batch)
    sent = json.loads(kit.load_event("batches-create.json")["body"])
    assert batch["status"] == "validating"
    assert batch["input_file_id"] == file["id"]
    assert batch["endpoint"] == sent["endpoint"]
    assert batch["completion_window"] == "24h"
    assert batch["metadata"] == sent["metadata"]
    assert batch["expires_at"] == batch["created_at"] + 24 * 3600
    assert batch["output_file_id"] is None and batch["error_file_id"] is None
    assert api.retrieve(batch["id"]) == batch

    status, listing = invoke_json(api.batches, api.event("batches-list.json"))
    assert status == 200, listing
    assert listing["object"] == "list"
    assert isinstance(listing["has_more"], bool)
    assert listing["data"][0] == batch, "the newest batch comes first"
    assert listing["first_id"] == batch["id"]
    assert all(set(b) == BATCH_KEYS for b in listing["data"])
    created = [b["created_at"] for b in listing["data"]]
    assert created == sorted(created, reverse=True)


def test_create_sends_a_validate_job(api: Api, moto: kit.MotoServer, source: EventSource) -> None:
    file = api.upload(jsonl([chat_line("v1")]))
    batch = api.create_ok(file["id"])
    done = run_until(api, source, batch["id"])
    jobs = [d.job for d in source.jobs_for(batch["id"])]
    assert {"job": "validate", "batch_id": batch["id"]} in jobs, jobs
    assert done["status"] == "completed", done


def test_unknown_batch_is_404(api: Api) -> None:
    missing = "batch_00000000000000000000000000"
    for name in sorted(NEEDS_BATCH_ID):
        status, body = invoke_json(api.batches, api.event(name, batch_id=missing))
        assert status == 404, f"{name}: HTTP {status}: {body}"
        assert body["error"]["message"] == f"No such Batch object: {missing}", body


def test_create_with_an_unknown_file_is_404(api: Api) -> None:
    status, body = api.create("file-doesnotexist000000000000")
    assert status == 404, body
    assert body["error"]["param"] == "input_file_id", body
    assert body["error"]["message"] == "No such File object: file-doesnotexist000000000000", body


def test_create_rejects_bad_parameters(api: Api) -> None:
    file = api.upload(jsonl([chat_line("p")]))
    for changes, param in (
        ({"endpoint": "/v1/completions"}, "endpoint"),
        ({"completion_window": "1h"}, "completion_window"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ):
        status, body = api.create(file["id"], **changes)
        assert status == 400, (changes, body)
        assert body["error"]["param"] == param, (changes, body)


def test_create_needs_a_batch_purpose_file(api: Api) -> None:
    file = api.upload(jsonl([chat_line("p")]), filename="notes.jsonl", purpose="user_data")
    status, body = api.create(file["id"])
    assert status == 400, body
    assert body["error"]["param"] == "input_file_id", body


def test_idempotency_key_returns_the_first_batch(api: Api) -> None:
    file = api.upload(jsonl([chat_line("idem")]))
    event = api.event("batches-create.json", file_id=file["id"])
    event["headers"]["idempotency-key"] = f"lambda-rie-{time.time_ns()}"
    status, first = invoke_json(api.batches, event)
    assert status == 200, first
    status, again = invoke_json(api.batches, event)
    assert status == 200, again
    assert again["id"] == first["id"]


def test_other_project_gets_404(api: Api, aws_cli: kit.NimbusCli) -> None:
    file = api.upload(jsonl([chat_line("mine")]))
    batch = api.create_ok(file["id"])
    other = Api(api.files, api.batches, aws_cli.create_key("other-batches", name="batches-other")["api_key"])
    for name in sorted(NEEDS_BATCH_ID):
        status, body = invoke_json(other.batches, other.event(name, batch_id=batch["id"]))
        assert status == 404, f"{name}: HTTP {status}: {body}"
    status, listing = invoke_json(other.batches, other.event("batches-list.json"))
    assert status == 200 and batch["id"] not in {b["id"] for b in listing["data"]}
    status, body = other.create(file["id"])
    assert status == 404, body


# --------------------------------------------------------------------------------------------
# Whole batches through the queue
# --------------------------------------------------------------------------------------------


def test_batch_runs_to_completion(api: Api, source: EventSource, moto: kit.MotoServer) -> None:
    succeeded = {f"req-{i}" for i in range(1, 6)}
    lines = [chat_line(cid, f"Hello number {cid}") for cid in sorted(succeeded)]
    lines.insert(2, chat_line("will-fail", model="dummy-error"))
    file = api.upload(jsonl(lines))
    batch = api.create_ok(file["id"])
    done = run_until(api, source, batch["id"])
    output, errors = check_results(api, done, succeeded=succeeded, failed={"will-fail"})
    assert errors[0]["response"]["body"]["error"]["message"], errors
    assert not any(d.failed for d in source.jobs_for(batch["id"])), "a job had to be retried"
    kinds = Counter(d.job["job"] for d in source.jobs_for(batch["id"]))
    assert kinds == {"validate": 1, "chunk": 1}, kinds
    # The results live under batches/<project>/<batch>/ and the output files with the other files.
    s3 = moto.client("s3")
    listed = s3.list_objects_v2(Bucket=moto.bucket, Prefix=f"projects/{PROJECT}/files/")
    keys = [o["Key"] for o in listed.get("Contents", [])]
    assert f"projects/{PROJECT}/files/{done['output_file_id']}" in keys
    # Every output line answers the request it names.
    by_id = {line["custom_id"]: line for line in output}
    assert set(by_id) == succeeded


def test_multi_chunk_batch_with_duplicate_deliveries(api: Api, chunky_source: EventSource) -> None:
    """Each chunk job handed to the worker twice (the same event twice, then a redelivery with a new
    receipt handle, as when a deletion is lost): nothing runs or counts twice."""
    source = chunky_source
    ids = [f"dup-{i:02d}" for i in range(8)]
    lines = [chat_line(cid, f"line {cid}") for cid in ids]
    lines.insert(4, chat_line("dup-fail", model="dummy-error"))
    file = api.upload(jsonl(lines))
    batch = api.create_ok(file["id"])
    chunks_seen: set[int] = set()
    deadline = time.monotonic() + 180
    while api.retrieve(batch["id"])["status"] not in TERMINAL:
        assert time.monotonic() < deadline, api.retrieve(batch["id"])
        messages = source.receive()
        if not messages:
            source.poll()
            time.sleep(0.3)
            continue
        for message in messages:
            job = json.loads(message["Body"])
            if job.get("batch_id") != batch["id"] or job.get("job") != "chunk" or job["chunk"] in chunks_seen:
                source.deliver(message)
                continue
            chunks_seen.add(job["chunk"])
            event = sqs_event(message, source.arn)
            assert invoke_worker(source.worker, event) == set(), job
            assert invoke_worker(source.worker, event) == set(), f"same event again: {job}"
            # The deletion is "lost": the message comes back with a new receipt handle.
            source.sqs.change_message_visibility(
                QueueUrl=source.moto.queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
            )
            again: list[dict[str, Any]] = []
            for _ in range(50):
                received = source.receive()
                again = [m for m in received if m["MessageId"] == message["MessageId"]]
                source.release([m for m in received if m["MessageId"] != message["MessageId"]])
                if again:
                    break
                time.sleep(0.1)
            assert again, "the message did not come back"
            assert again[0]["ReceiptHandle"] != message["ReceiptHandle"]
            assert source.deliver(again[0]), f"redelivery of {job} was reported failed"
    done = api.retrieve(batch["id"])
    expected_chunks = -(-len(lines) // CHUNK_LINES)
    assert chunks_seen == set(range(expected_chunks)), (chunks_seen, expected_chunks)
    check_results(api, done, succeeded=set(ids), failed={"dup-fail"})


def test_chunk_resumes_after_the_invocation_deadline(api: Api, short_lived_source: EventSource) -> None:
    """A chunk that outlasts one invocation: the worker saves what ran, reports the message in
    `batchItemFailures` (visibility 0: redelivered at once), and the next invocations go on from
    there. Every line runs exactly once."""
    source = short_lived_source
    ids = {f"slow-{i}" for i in range(6)}
    file = api.upload(jsonl([chat_line(cid, model="dummy-slow") for cid in sorted(ids)]))
    batch = api.create_ok(file["id"])
    done = run_until(api, source, batch["id"], timeout=240)
    chunk_runs = [d for d in source.jobs_for(batch["id"]) if d.job["job"] == "chunk"]
    assert len(chunk_runs) >= 2 and any(d.failed for d in chunk_runs), [(d.job, d.failed) for d in chunk_runs]
    assert not chunk_runs[-1].failed
    check_results(api, done, succeeded=ids, failed=set())


def test_duplicate_validate_job(api: Api, source: EventSource) -> None:
    """`worker-sqs-validate.json` sent by hand (as with `sam local invoke`, a receipt handle SQS never
    issued) while the real validate message is still queued: the batch is validated once."""
    ids = {"hand-1", "hand-2", "hand-3"}
    file = api.upload(jsonl([chat_line(cid) for cid in sorted(ids)]))
    batch = api.create_ok(file["id"])
    assert invoke_worker(source.worker, replaced_worker_event("worker-sqs-validate.json", batch["id"])) == set()
    assert api.retrieve(batch["id"])["status"] in {"in_progress", "finalizing", "completed"}
    done = run_until(api, source, batch["id"])
    check_results(api, done, succeeded=ids, failed=set())


def test_hand_made_chunk_event(api: Api, source: EventSource) -> None:
    """`worker-sqs-chunk.json` with the batch id filled in runs chunk 0 even with a made-up receipt."""
    ids = {"chunk-by-hand-1", "chunk-by-hand-2"}
    file = api.upload(jsonl([chat_line(cid) for cid in sorted(ids)]))
    batch = api.create_ok(file["id"])
    run_until(api, source, batch["id"], until=lambda b: b["status"] != "validating")
    assert invoke_worker(source.worker, replaced_worker_event("worker-sqs-chunk.json", batch["id"])) == set()
    done = run_until(api, source, batch["id"])
    check_results(api, done, succeeded=ids, failed=set())


def test_validation_failure(api: Api, source: EventSource) -> None:
    content = jsonl([chat_line("ok"), chat_line("ok")]) + b"{not json\n"
    file = api.upload(content)
    batch = api.create_ok(file["id"])
    done = run_until(api, source, batch["id"])
    assert done["status"] == "failed", done
    assert isinstance(done["failed_at"], int)
    errors = done["errors"]
    assert errors["object"] == "list"
    codes = {(e["code"], e["line"]) for e in errors["data"]}
    assert ("duplicate_custom_id", 2) in codes, errors
    assert ("invalid_json_line", 3) in codes, errors
    assert done["output_file_id"] is None and done["error_file_id"] is None


def test_cancel_event_while_validating(api: Api, source: EventSource) -> None:
    ids = [f"c-{i}" for i in range(4)]
    file = api.upload(jsonl([chat_line(cid) for cid in ids]))
    batch = api.create_ok(file["id"])
    status, cancelling = api.cancel(batch["id"])
    assert status == 200, cancelling
    check_batch(cancelling)
    assert cancelling["status"] in {"cancelling", "cancelled"}, cancelling
    assert isinstance(cancelling["cancelling_at"], int)
    done = run_until(api, source, batch["id"])
    assert done["status"] == "cancelled", done
    assert isinstance(done["cancelled_at"], int)
    output, errors = api.results(done)
    assert not output, output
    for line in errors:
        assert line["response"] is None and line["error"]["code"] == "batch_cancelled", line
    # The validate job still queued finds the batch cancelled and is dropped.
    while source.pump():
        pass
    assert not any(d.failed for d in source.jobs_for(batch["id"]))
    status, again = api.cancel(batch["id"])
    assert status == 200, again
    assert again == done == api.retrieve(batch["id"])


def test_cancel_event_in_progress(api: Api, source: EventSource) -> None:
    """Cancelled after validation, before its chunk ran: every line is in the error file as
    `batch_cancelled` with `response: null`."""
    ids = {f"ip-{i}" for i in range(4)}
    file = api.upload(jsonl([chat_line(cid) for cid in sorted(ids)]))
    batch = api.create_ok(file["id"])
    run_until(api, source, batch["id"], until=lambda b: b["status"] != "validating")
    assert api.retrieve(batch["id"])["status"] == "in_progress"
    status, cancelled = api.cancel(batch["id"])
    assert status == 200, cancelled
    done = run_until(api, source, batch["id"])
    assert done["status"] == "cancelled", done
    assert done["output_file_id"] is None, done
    assert done["request_counts"] == {"total": 4, "completed": 0, "failed": 4}, done
    _, errors = api.results(done)
    assert Counter(line["custom_id"] for line in errors) == Counter(ids), errors
    for line in errors:
        assert line["id"].startswith("batch_req_"), line
        assert line["response"] is None, line
        assert line["error"]["code"] == "batch_cancelled" and line["error"]["message"], line
    # The chunk job still queued finds the batch cancelled: dropped, no retry, nothing changes.
    while source.pump():
        pass
    assert not any(d.failed for d in source.jobs_for(batch["id"]))
    assert api.retrieve(batch["id"]) == done


def test_cancel_a_completed_batch_is_409(api: Api, source: EventSource) -> None:
    file = api.upload(jsonl([chat_line("done")]))
    batch = api.create_ok(file["id"])
    done = run_until(api, source, batch["id"])
    assert done["status"] == "completed", done
    status, body = api.cancel(batch["id"])
    assert status == 409, body
    assert body["error"]["message"] == "Cannot cancel a batch with status 'completed'.", body
    assert api.retrieve(batch["id"]) == done


# --------------------------------------------------------------------------------------------
# The AWS requests of one batch, and whether the template's policies allow them
# --------------------------------------------------------------------------------------------

# Each function signs with its own (fake) access key, so the recording tells them apart.
FUNCTION_KEYS = {
    "NimbusFilesFunction": "AKIANIMBUSFILES",
    "NimbusBatchesFunction": "AKIANIMBUSBATCHES",
    "NimbusWorkerFunction": "AKIANIMBUSWORKER",
    "NimbusPollerFunction": "AKIANIMBUSPOLLER",
}


@dataclass
class RecordedStack:
    moto: kit.MotoServer
    api: Api
    source: EventSource

    def post(self, action: str) -> str:
        response = requests.post(f"{self.moto.endpoint}/moto-api/recorder/{action}", timeout=30)
        assert response.status_code == 200, response.text
        return response.text

    def recording(self) -> list[dict[str, Any]]:
        response = requests.get(f"{self.moto.endpoint}/moto-api/recorder/download-recording", timeout=30)
        assert response.status_code == 200, response.text
        return [json.loads(line) for line in response.text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def recorded_stack(
    tmp_path_factory: pytest.TempPathFactory, logs_dir: Path, batch_lambda_factory: Callable[..., kit.LambdaUnderRie]
) -> Iterator[RecordedStack]:
    """Its own moto server (recording requests to a file of its own), key and functions."""
    functions: dict[str, kit.LambdaUnderRie] = {}
    recording = tmp_path_factory.mktemp("moto-recording") / "requests.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MOTO_RECORDER_FILEPATH", str(recording))
        moto = kit.MotoServer(logs_dir)
    try:
        moto.create_resources()
        key = kit.NimbusCli(kit.clean_env(moto.aws_env()), backend="aws").create_key(PROJECT, name="recorded")
        sizes = {
            "NimbusFilesFunction": ("nimbus-files", "1024", "30"),
            "NimbusBatchesFunction": ("nimbus-batches", "256", "30"),
            "NimbusWorkerFunction": ("nimbus-worker", "512", str(WORKER_TIMEOUT_S)),
            "NimbusPollerFunction": ("nimbus-poller", "256", "300"),
        }
        for resource, (binary, memory, timeout) in sizes.items():
            functions[resource] = batch_lambda_factory(
                resource,
                binary,
                memory=memory,
                timeout=timeout,
                name=f"rie-recorded-{binary.removeprefix('nimbus-')}",
                moto=moto,
                extra_env={"AWS_ACCESS_KEY_ID": FUNCTION_KEYS[resource]},
            )
        api = Api(functions["NimbusFilesFunction"], functions["NimbusBatchesFunction"], key["api_key"])
        yield RecordedStack(
            moto, api, EventSource(moto, functions["NimbusWorkerFunction"], functions["NimbusPollerFunction"])
        )
    finally:
        for function in functions.values():
            function.stop()
        moto.stop()


def template_policies() -> dict[str, list[dict[str, Any]]]:
    """Each batch-path function's policy statements from template.yaml (ConfigSource=bundled)."""
    from samcli.yamlhelper import yaml_parse  # noqa: PLC0415

    template = yaml_parse(kit.TEMPLATE.read_text())
    policies: dict[str, list[dict[str, Any]]] = {}
    for name in FUNCTION_KEYS:
        statements: list[dict[str, Any]] = []
        for policy in template["Resources"][name]["Properties"].get("Policies", []):
            if isinstance(policy, dict) and "Statement" in policy:
                statements.extend(policy["Statement"])
        policies[name] = statements
    return policies


def resource_pattern(resource: Any) -> str:
    """`!GetAtt NimbusStateTable.Arn` → `table`, `!Sub "${NimbusBucket.Arn}/projects/*"` →
    `bucket/projects/*`, and so on (one symbolic name per ARN shape)."""
    if isinstance(resource, dict) and "Fn::GetAtt" in resource:
        target = resource["Fn::GetAtt"]
        target = target if isinstance(target, list) else target.split(".")
        return {"NimbusStateTable": "table", "NimbusBucket": "bucket", "NimbusJobsQueue": "queue"}[target[0]]
    if isinstance(resource, dict) and "Fn::Sub" in resource:
        text = resource["Fn::Sub"]
        text = text.replace("${NimbusStateTable.Arn}", "table").replace("${NimbusBucket.Arn}", "bucket")
        return text
    raise AssertionError(f"unexpected resource in template.yaml: {resource!r}")


def allowed(statements: list[dict[str, Any]], action: str, resource: str, prefix: str | None) -> bool:
    for statement in statements:
        if statement.get("Effect") != "Allow":
            continue
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if action not in actions:
            continue
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        if not any(fnmatch.fnmatchcase(resource, resource_pattern(r)) for r in resources):
            continue
        condition = (statement.get("Condition") or {}).get("StringLike", {}).get("s3:prefix")
        if condition is not None:
            patterns = condition if isinstance(condition, list) else [condition]
            if prefix is None or not any(fnmatch.fnmatchcase(prefix, p) for p in patterns):
                continue
        return True
    return False


def iam_actions(entry: dict[str, Any], bucket: str) -> list[tuple[str, str, str | None]]:
    """(IAM action, symbolic resource, s3:prefix) needed by one recorded request."""
    headers = {k.lower(): v for k, v in entry["headers"].items()}
    body = entry.get("body") or ""
    if entry.get("body_encoded"):
        body = base64.b64decode(body).decode(errors="replace")
    target = headers.get("x-amz-target", "")
    if target.startswith("DynamoDB_"):
        operation = target.split(".", 1)[1]
        payload = json.loads(body or "{}")
        resource = "table/index/by_owner" if payload.get("IndexName") else "table"
        if operation == "TransactWriteItems":
            kinds = {
                "Put": "PutItem",
                "Update": "UpdateItem",
                "Delete": "DeleteItem",
                "ConditionCheck": "ConditionCheckItem",
            }
            return [
                (f"dynamodb:{kinds[kind]}", "table", None)
                for item in payload.get("TransactItems", [])
                for kind in item
            ]
        return [(f"dynamodb:{operation}", resource, None)]
    if target.startswith("AmazonSQS."):
        return [(f"sqs:{target.split('.', 1)[1]}", "queue", None)]
    url = urlsplit(entry["url"])
    query = parse_qs(url.query, keep_blank_values=True)
    path = unquote(url.path).lstrip("/")
    host_bucket = headers.get("host", "").split(".")[0] if headers.get("host", "").startswith(f"{bucket}.") else None
    if host_bucket:
        key = path
    else:
        assert path.split("/", 1)[0] == bucket, f"another bucket or service: {entry['method']} {entry['url']}"
        key = path.split("/", 1)[1] if "/" in path else ""
    method = entry["method"]
    if not key:
        if method == "GET" and "uploads" in query:
            return [("s3:ListBucketMultipartUploads", "bucket", query.get("prefix", [None])[0])]
        if method == "GET":
            return [("s3:ListBucket", "bucket", query.get("prefix", [None])[0])]
        if method == "POST" and "delete" in query:
            keys = re.findall(r"<Key>([^<]*)</Key>", body)
            return [("s3:DeleteObject", f"bucket/{k}", None) for k in keys]
        raise AssertionError(f"unclassified bucket request: {method} {entry['url']}")
    resource = f"bucket/{key}"
    if method in {"GET", "HEAD"}:
        return [("s3:ListMultipartUploadParts" if "uploadId" in query else "s3:GetObject", resource, None)]
    if method in {"PUT", "POST"}:
        needs = [("s3:PutObject", resource, None)]
        if "x-amz-copy-source" in headers:
            source_key = unquote(headers["x-amz-copy-source"]).lstrip("/").split("/", 1)[1].split("?")[0]
            needs.append(("s3:GetObject", f"bucket/{source_key}", None))
        return needs
    if method == "DELETE":
        return [("s3:AbortMultipartUpload" if "uploadId" in query else "s3:DeleteObject", resource, None)]
    raise AssertionError(f"unclassified request: {method} {entry['url']}")


def function_of(entry: dict[str, Any]) -> str | None:
    headers = {k.lower(): v for k, v in entry["headers"].items()}
    credential = re.search(r"Credential=([^/]+)/", headers.get("authorization", ""))
    access_key = credential.group(1) if credential else None
    return {v: k for k, v in FUNCTION_KEYS.items()}.get(access_key or "")


def denied_requests(recorded: list[dict[str, Any]], bucket: str) -> tuple[list[str], Counter[tuple[str, str]]]:
    """Requests of the functions that their policy in template.yaml would not allow, and the count
    of each (function, IAM action)."""
    policies = template_policies()
    counts: Counter[tuple[str, str]] = Counter()
    denied: list[str] = []
    for entry in recorded:
        function = function_of(entry)
        if function is None:
            continue  # the test's own boto3 calls (the stand-in event source) and the moto API
        for action, resource, prefix in iam_actions(entry, bucket):
            counts[(function, action)] += 1
            if not allowed(policies[function], action, resource, prefix):
                denied.append(f"{function}: {action} on {resource}" + (f" (prefix {prefix})" if prefix else ""))
    return sorted(set(denied)), counts


def test_one_batch_aws_requests_are_allowed_by_the_template(recorded_stack: RecordedStack, logs_dir: Path) -> None:
    """Runs one batch (10 lines, one of them failing) with moto recording every request; checks each
    request of each function against that function's policy in template.yaml, and reports the counts
    (in `batch-aws-requests.json` beside the process logs)."""
    stack = recorded_stack
    ids = {f"rec-{i}" for i in range(9)}
    lines = [chat_line(cid) for cid in sorted(ids)] + [chat_line("rec-fail", model="dummy-error")]
    file = stack.api.upload(jsonl(lines))
    stack.post("reset-recording")
    stack.post("start-recording")
    try:
        batch = stack.api.create_ok(file["id"])
        done = run_until(stack.api, stack.source, batch["id"])
    finally:
        stack.post("stop-recording")
    recorded = stack.recording()
    check_results(stack.api, done, succeeded=ids, failed={"rec-fail"})
    denied, counts = denied_requests(recorded, stack.moto.bucket)
    summary = {
        "lines": len(lines),
        "worker_invocations": len(stack.source.jobs_for(batch["id"])),
        "poller_passes": len(stack.source.poll_reports),
        "requests_by_function": dict(Counter(function_of(e) or "test-driver" for e in recorded)),
        "iam_actions": {f"{fn} {action}": n for (fn, action), n in sorted(counts.items())},
    }
    (logs_dir / "batch-aws-requests.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    assert not denied, "template.yaml does not allow:\n" + "\n".join(denied)
    assert counts, "no function request was recorded (is the moto recorder working?)"


def test_cancel_and_poller_requests_are_allowed_by_the_template(recorded_stack: RecordedStack) -> None:
    """Cancels (while validating, and while in progress: both finish at once in the batches
    function when no chunk is running) and poller passes, recorded and checked like a whole batch."""
    stack = recorded_stack
    stack.post("reset-recording")
    stack.post("start-recording")
    try:
        early = stack.api.create_ok(stack.api.upload(jsonl([chat_line("early-1"), chat_line("early-2")]))["id"])
        status, body = stack.api.cancel(early["id"])
        assert status == 200, body
        late = stack.api.create_ok(stack.api.upload(jsonl([chat_line("late-1"), chat_line("late-2")]))["id"])
        run_until(stack.api, stack.source, late["id"], until=lambda b: b["status"] != "validating")
        status, body = stack.api.cancel(late["id"])
        assert status == 200, body
        for batch in (early, late):
            done = run_until(stack.api, stack.source, batch["id"])
            assert done["status"] in {"cancelled", "completed"}, done
        while stack.source.pump():
            pass
        stack.source.poll()
    finally:
        stack.post("stop-recording")
    denied, counts = denied_requests(stack.recording(), stack.moto.bucket)
    assert not denied, "template.yaml does not allow:\n" + "\n".join(denied)
    assert any(fn == "NimbusPollerFunction" for fn, _ in counts), counts
