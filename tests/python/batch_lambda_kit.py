"""Helpers for the Batch API tests on its AWS path (test_batches_lambda_*.py): `nimbus-batches`,
`nimbus-worker` and `nimbus-poller` under the Runtime Interface Emulator, with their state, bytes
and jobs in moto, driven by the `infra/events/batches-*.json`, `worker-*.json` and `poller-*.json`
event files (`/v1/batches`, and TensorZero's `/batch_inference` in `batches-batch-inference-*.json`).

Moto runs no Lambda triggers, so the tests play both AWS services that start the functions:
- the SQS event source: receive the jobs queue's messages (boto3), wrap each in an SQS event shaped
  like `worker-sqs-validate.json` / `worker-sqs-chunk.json` (one record: the template's BatchSize is
  1), invoke the worker, and delete the messages it did not report in `batchItemFailures`
  (`EventSource`);
- the EventBridge schedule: invoke the poller with `poller-scheduled.json` whenever the queue is idle
  (`EventSource.poll`, `run_until`).

Input files are uploaded and results downloaded through the files Lambda (`files-create.json`,
`files-content.json`). The placeholder bearer is replaced by a key of project `demo` (`Api`).
The `api` and `source` fixtures (conftest.py) build an `Api` and an `EventSource` on the session's
functions.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import nimbus_testkit as kit

PROJECT = "demo"
FILE_ID_PLACEHOLDER = "file-REPLACE_WITH_FILE_ID"
BATCH_ID_PLACEHOLDER = "batch_REPLACE_WITH_BATCH_ID"
# `/batch_inference` ids are bare UUIDs (no `batch_` prefix).
TZ_BATCH_ID_PLACEHOLDER = "REPLACE_WITH_BATCH_ID"
TZ_INFERENCE_ID_PLACEHOLDER = "REPLACE_WITH_INFERENCE_ID"
TZ_SUBMIT_EVENT = "batches-batch-inference-submit.json"
TZ_POLL_EVENT = "batches-batch-inference-poll.json"
TZ_POLL_ONE_EVENT = "batches-batch-inference-poll-inference.json"
TERMINAL = kit.BATCH_TERMINAL_STATUSES
BATCH_KEYS = kit.BATCH_KEYS
WORKER_TIMEOUT_S = 300  # template.yaml: NimbusWorkerFunction Timeout

# A function whose only variant calls the always-failing model: a `/batch_inference` batch of it
# fails item by item. Added to the default config by `config_with_failing_function`.
FAILING_FUNCTION = "always_fails"
_FAILING_FUNCTION_TOML = f"""
[functions.{FAILING_FUNCTION}]
type = "chat"

[functions.{FAILING_FUNCTION}.variants.broken]
type = "chat_completion"
model = "dummy-error"
"""


def config_with_failing_function() -> str:
    """The default config plus `FAILING_FUNCTION`."""
    return f"{kit.DEFAULT_CONFIG.read_text().rstrip()}\n{_FAILING_FUNCTION_TOML}"


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

    def submit_batch_inference(self, **changes: Any) -> tuple[int, Any]:
        """`POST /batch_inference` with the event file's body, top-level keys replaced by
        `changes` (a `None` removes the key)."""
        event = self.event(TZ_SUBMIT_EVENT)
        if changes:
            body = {**json.loads(event["body"]), **changes}
            event = kit.with_body(event, {k: v for k, v in body.items() if v is not None})
        return invoke_json(self.batches, event)

    def poll_batch_inference(
        self, batch_id: str, inference_id: str | None = None, query: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """`GET /batch_inference/{batch_id}` (or `/inference/{inference_id}` of it), with `query`."""
        name = TZ_POLL_EVENT if inference_id is None else TZ_POLL_ONE_EVENT
        event = kit.replace_strings(self.event(name), TZ_BATCH_ID_PLACEHOLDER, batch_id)
        if inference_id is not None:
            event = kit.replace_strings(event, TZ_INFERENCE_ID_PLACEHOLDER, inference_id)
        if query:
            event["queryStringParameters"] = dict(query)
            event["rawQueryString"] = "&".join(f"{k}={v}" for k, v in query.items())
        return invoke_json(self.batches, event)

    def results(self, batch: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        def lines(file_id: str | None) -> list[dict[str, Any]]:
            return parse_jsonl(self.file_content(file_id)) if file_id else []

        return lines(batch["output_file_id"]), lines(batch["error_file_id"])


def check_no_retries(source: EventSource, batch_id: str) -> None:
    """No job of the batch was reported failed by the worker (none handed back for a retry)."""
    retried = [d.job for d in source.jobs_for(batch_id) if d.failed]
    assert not retried, f"the worker reported jobs of batch {batch_id} failed: {retried}"


def run_until(
    api: Api,
    source: EventSource,
    batch_id: str,
    *,
    until: Callable[[dict[str, Any]], bool] | None = None,
    timeout: float = 180.0,
    no_retries: bool = False,
) -> dict[str, Any]:
    """Deliver queued jobs and run the poller whenever the queue is idle, until the batch satisfies
    `until` (default: a terminal status). Returns the batch; fails with the last one seen. With
    `no_retries`, a job of the batch that the worker reported failed (to be retried) fails at once."""
    until = until or (lambda batch: batch["status"] in TERMINAL)
    deadline = time.monotonic() + timeout
    while True:
        if no_retries:
            check_no_retries(source, batch_id)
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


def run_batch_inference_until_done(
    api: Api, source: EventSource, batch_id: str, *, timeout: float = 180.0, no_retries: bool = False
) -> dict[str, Any]:
    """Deliver queued jobs, and run the poller whenever the queue is idle, until polling the
    `/batch_inference` batch no longer answers `{"status": "pending"}`; returns that answer. With
    `no_retries`, a job of the batch that the worker reported failed (to be retried) fails at once."""
    deadline = time.monotonic() + timeout
    while True:
        if no_retries:
            check_no_retries(source, batch_id)
        status, poll = api.poll_batch_inference(batch_id)
        assert status == 200, poll
        if poll != {"status": "pending"}:
            return poll
        if time.monotonic() > deadline:
            raise AssertionError(
                f"batch {batch_id} still pending after {timeout:.0f}s; "
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
        assert line["response"]["status_code"] == 500, line
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
