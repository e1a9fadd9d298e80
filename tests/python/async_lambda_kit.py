"""Helpers for async inference on the AWS path (test_async_lambda.py, test_poison_lambda.py):
`Stack`, the HTTP side (`nimbus-batches`: `/async_predict`, `/async_request/…`) with a project's key,
and the SQS event sources of the three priority queues feeding `nimbus-worker` (receive a request's
message, wrap it in the `worker-sqs-async-*.json` event file of its job with `sqs_event`, invoke
the worker, delete the message unless reported failed); `poll` plays the poller's schedule.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import nimbus_testkit as kit
from batch_lambda_kit import WORKER_TIMEOUT_S, invoke_json, invoke_worker

REQUEST_ID_PLACEHOLDER = "REPLACE_WITH_REQUEST_ID"
RUN_EVENTS = {level: f"worker-sqs-async-run-p{level}.json" for level in range(3)}
DELIVER_EVENT = "worker-sqs-async-deliver.json"


@dataclass
class Stack:
    """One moto's functions and two projects' keys (`api_key` is used unless another is given)."""

    moto: kit.MotoServer
    batches: kit.LambdaUnderRie
    worker: kit.LambdaUnderRie
    poller: kit.LambdaUnderRie
    api_key: str
    other_key: str

    def __post_init__(self) -> None:
        self.sqs = self.moto.client("sqs")
        self.arns = {
            level: self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            for level, url in self.moto.async_queue_urls.items()
        }

    # HTTP side -------------------------------------------------------------------------------

    def event(self, name: str, *, request_id: str | None = None, key: str | None = None) -> dict[str, Any]:
        event = kit.with_api_key(kit.load_event(name), key or self.api_key)
        if request_id is not None:
            event = kit.replace_strings(event, REQUEST_ID_PLACEHOLDER, request_id)
        return event

    def submit(self, name: str = "batches-async-predict.json", **changes: Any) -> tuple[int, Any]:
        """`POST` the event file's body with top-level `changes` (None removes a key)."""
        event = self.event(name)
        body = {**json.loads(event["body"]), **changes}
        return invoke_json(self.batches, kit.with_body(event, {k: v for k, v in body.items() if v is not None}))

    def submit_ok(self, name: str = "batches-async-predict.json", **changes: Any) -> str:
        status, answer = self.submit(name, **changes)
        assert status == 200 and set(answer) == {"request_id"}, (status, answer)
        return answer["request_id"]

    def status(self, request_id: str, *, key: str | None = None) -> tuple[int, Any]:
        return invoke_json(self.batches, self.event("batches-async-request-get.json", request_id=request_id, key=key))

    def status_ok(self, request_id: str) -> dict[str, Any]:
        code, status = self.status(request_id)
        assert code == 200, status
        return status

    def cancel(self, request_id: str, *, key: str | None = None) -> tuple[int, Any]:
        return invoke_json(self.batches, self.event("batches-async-request-delete.json", request_id=request_id, key=key))

    # The SQS event sources and the schedule ------------------------------------------------------

    def receive_job(self, level: int, request_id: str, *, timeout: float = 10.0) -> dict[str, Any]:
        """The next message of priority queue `level` for `request_id` (others are left in the queue)."""
        deadline = time.monotonic() + timeout
        while True:
            messages = self.sqs.receive_message(
                QueueUrl=self.moto.async_queue_urls[level], MaxNumberOfMessages=10, WaitTimeSeconds=1, AttributeNames=["All"]
            ).get("Messages", [])
            mine = [m for m in messages if json.loads(m["Body"]).get("request_id") == request_id]
            for message in messages:
                if message not in mine[:1]:
                    self.sqs.change_message_visibility(
                        QueueUrl=self.moto.async_queue_urls[level], ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
                    )
            if mine:
                return mine[0]
            assert time.monotonic() < deadline, f"no job for {request_id} in priority queue {level} within {timeout:.0f}s"

    def jobs_waiting(self, level: int, request_id: str) -> list[dict[str, Any]]:
        """The jobs of `request_id` visible in queue `level` now (left in the queue)."""
        messages = self.sqs.receive_message(
            QueueUrl=self.moto.async_queue_urls[level], MaxNumberOfMessages=10, WaitTimeSeconds=0
        ).get("Messages", [])
        for message in messages:
            self.sqs.change_message_visibility(
                QueueUrl=self.moto.async_queue_urls[level], ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
            )
        return [json.loads(m["Body"]) for m in messages if json.loads(m["Body"]).get("request_id") == request_id]

    def deliver(self, level: int, message: dict[str, Any]) -> bool:
        """Hand one message to the worker as the queue's event source; delete it unless the worker
        reported it failed. True = done."""
        failures = invoke_worker(self.worker, sqs_event(message, self.arns[level]))
        if message["MessageId"] in failures:
            return False
        self.sqs.delete_message(QueueUrl=self.moto.async_queue_urls[level], ReceiptHandle=message["ReceiptHandle"])
        return True

    def run_job(self, level: int, request_id: str) -> dict[str, Any]:
        """Receive `request_id`'s next job from queue `level`, run it through the worker; the job."""
        message = self.receive_job(level, request_id)
        assert self.deliver(level, message), f"the worker reported {message['Body']} failed"
        return json.loads(message["Body"])

    def drop_job(self, level: int, request_id: str) -> dict[str, Any]:
        """Receive `request_id`'s next job and delete it unrun (a lost message)."""
        message = self.receive_job(level, request_id)
        self.sqs.delete_message(QueueUrl=self.moto.async_queue_urls[level], ReceiptHandle=message["ReceiptHandle"])
        return json.loads(message["Body"])

    def poll(self) -> dict[str, Any]:
        report = self.poller.invoke(kit.load_event("poller-scheduled.json"), timeout=WORKER_TIMEOUT_S + 30)
        assert isinstance(report, dict) and set(report) == {"tasks", "errors"}, report
        assert report["errors"] == 0, report
        return report


def sqs_event(message: dict[str, Any], arn: str) -> dict[str, Any]:
    """The event Lambda's SQS event source sends for one message of a priority queue, built from the
    event file of the message's job (so the files are what the worker is tested with)."""
    job = json.loads(message["Body"])
    name = DELIVER_EVENT if job["job"] == "async_deliver" else RUN_EVENTS[1]
    event = kit.load_event(name)
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
