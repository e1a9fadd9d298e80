"""Whole batches through the queue on the AWS path: `nimbus-batches`, `nimbus-worker` and
`nimbus-poller` under the RIE with moto, the tests playing the SQS event source and the EventBridge
schedule (batch_lambda_kit.py): completion, duplicate deliveries, chunks outlasting an invocation,
hand-made worker events, validation failures and cancels.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

import nimbus_testkit as kit
from batch_lambda_kit import (
    PROJECT,
    TERMINAL,
    WORKER_TIMEOUT_S,
    Api,
    EventSource,
    chat_line,
    check_batch,
    check_results,
    invoke_worker,
    jsonl,
    replaced_worker_event,
    run_until,
    sqs_event,
)

CHUNK_LINES = 3  # lines_per_chunk of the worker that runs multi-chunk batches


# --------------------------------------------------------------------------------------------
# Workers with another config
# --------------------------------------------------------------------------------------------


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
    source = moto.put_config(name, config)
    return start(
        "NimbusWorkerFunction",
        "nimbus-worker",
        memory="512",
        timeout=str(timeout),
        name=f"rie-{name}",
        extra_env={"NIMBUS_CONFIG_SOURCE": source},
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
    # OpenAI's three counts, and Nimbus's `not_run`: none of the lines ran.
    assert done["request_counts"] == {"total": 4, "completed": 0, "failed": 4, "not_run": 4}, done
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
