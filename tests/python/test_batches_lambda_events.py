"""The batch path's event files (`infra/events/batches-*.json`, `worker-*.json`, `poller-*.json`):
their shape, what each produces as it is (placeholders left in), and the HTTP events with real ids,
against `nimbus-batches`, `nimbus-worker` and `nimbus-poller` under the RIE with moto (helpers in
batch_lambda_kit.py). The `/batch_inference` events (`batches-batch-inference-*.json`) are checked
here too; their flow is in test_batch_inference_lambda.py.
"""

from __future__ import annotations

import hashlib
import json
import re
import time

import pytest

import nimbus_testkit as kit
from batch_lambda_kit import (
    BATCH_ID_PLACEHOLDER,
    BATCH_KEYS,
    FILE_ID_PLACEHOLDER,
    TZ_BATCH_ID_PLACEHOLDER,
    TZ_INFERENCE_ID_PLACEHOLDER,
    WORKER_TIMEOUT_S,
    Api,
    EventSource,
    chat_line,
    check_batch,
    invoke_json,
    invoke_worker,
    jsonl,
    replaced_worker_event,
    run_until,
)

HTTP_EVENT_NAMES = [path.name for path in kit.event_files("batches-*.json")]
# TensorZero's batch API on the same function: `/batch_inference` (errors are `{"error": "…"}`).
TZ_EVENT_NAMES = [path.name for path in kit.event_files("batches-batch-inference-*.json")]
# Baseten-style async inference on the same function (`/async_predict`, `/async_request/…`; errors
# are `{"error": "…", "code": "…"}`); checked with their flow in test_async_lambda.py.
ASYNC_EVENT_NAMES = [path.name for path in kit.event_files("batches-async-*.json")]
OPENAI_EVENT_NAMES = [name for name in HTTP_EVENT_NAMES if name not in TZ_EVENT_NAMES + ASYNC_EVENT_NAMES]
WORKER_EVENT_NAMES = [path.name for path in kit.event_files("worker-*.json")]
BATCH_WORKER_EVENT_NAMES = ["worker-sqs-validate.json", "worker-sqs-chunk.json"]
# The other families' jobs (async requests, webhook deliveries), from the priority queues.
OTHER_WORKER_EVENT_NAMES = [name for name in WORKER_EVENT_NAMES if name not in BATCH_WORKER_EVENT_NAMES]
# Each worker event's job: its `job`, its fields, and the queue (template resource) it comes from.
WORKER_JOBS: dict[str, tuple[str, set[str], str]] = {
    "worker-sqs-validate.json": ("validate", {"job", "batch_id"}, "NimbusJobsQueue"),
    "worker-sqs-chunk.json": ("chunk", {"job", "batch_id", "chunk"}, "NimbusJobsQueue"),
    "worker-sqs-async-run-p0.json": ("async_run", {"job", "request_id"}, "AsyncQueueP0"),
    "worker-sqs-async-run-p1.json": ("async_run", {"job", "request_id"}, "AsyncQueueP1"),
    "worker-sqs-async-run-p2.json": ("async_run", {"job", "request_id"}, "AsyncQueueP2"),
    "worker-sqs-async-deliver.json": ("async_deliver", {"job", "request_id", "attempt"}, "AsyncQueueP1"),
    "worker-sqs-webhook-deliver.json": ("webhook_deliver", {"job", "delivery_id", "attempt"}, "AsyncQueueP1"),
}
POLLER_EVENT_NAMES = [path.name for path in kit.event_files("poller-*.json")]
EVENT_NAMES = HTTP_EVENT_NAMES + WORKER_EVENT_NAMES + POLLER_EVENT_NAMES
NEEDS_BATCH_ID = {"batches-retrieve.json", "batches-cancel.json"}
ID_PLACEHOLDERS = {
    "batch_id": BATCH_ID_PLACEHOLDER,
    "request_id": "REPLACE_WITH_REQUEST_ID",
    "delivery_id": "REPLACE_WITH_DELIVERY_ID",
}

# What each event file produces as it is (placeholders left in); every event file needs an entry.
EXPECTED: dict[str, str] = {
    "batches-create.json": "401",
    "batches-list.json": "401",
    "batches-retrieve.json": "401",
    "batches-cancel.json": "401",
    "batches-batch-inference-submit.json": "401",
    "batches-batch-inference-poll.json": "401",
    "batches-batch-inference-poll-inference.json": "401",
    "batches-async-predict.json": "401",
    "batches-async-predict-model.json": "401",
    "batches-async-request-get.json": "401",
    "batches-async-request-delete.json": "401",
    "batches-async-requests-list.json": "401",
    "worker-sqs-validate.json": "no failure reported (unknown batch: the job is dropped)",
    "worker-sqs-chunk.json": "no failure reported (unknown batch: the job is dropped)",
    "worker-sqs-async-run-p0.json": "no failure reported (unknown request: the job is dropped)",
    "worker-sqs-async-run-p1.json": "no failure reported (unknown request: the job is dropped)",
    "worker-sqs-async-run-p2.json": "no failure reported (unknown request: the job is dropped)",
    "worker-sqs-async-deliver.json": "no failure reported (unknown request: the job is dropped)",
    "worker-sqs-webhook-deliver.json": "no failure reported (unknown delivery: the job is dropped)",
    "poller-scheduled.json": "a JSON report",
}

# --------------------------------------------------------------------------------------------
# The event files themselves (no processes needed)
# --------------------------------------------------------------------------------------------


def test_every_batch_event_has_an_expectation() -> None:
    assert set(EVENT_NAMES) == set(EXPECTED), (
        f"missing event files: {sorted(set(EXPECTED) - set(EVENT_NAMES))}; "
        f"event files without expectations here: {sorted(set(EVENT_NAMES) - set(EXPECTED))}"
    )


@pytest.mark.parametrize("name", OPENAI_EVENT_NAMES)
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


def test_batch_inference_has_an_event_per_route() -> None:
    events = [kit.load_event(name) for name in TZ_EVENT_NAMES]
    routes = {(event["requestContext"]["http"]["method"], event["rawPath"]) for event in events}
    assert routes == {
        ("POST", "/batch_inference"),
        ("GET", f"/batch_inference/{TZ_BATCH_ID_PLACEHOLDER}"),
        ("GET", f"/batch_inference/{TZ_BATCH_ID_PLACEHOLDER}/inference/{TZ_INFERENCE_ID_PLACEHOLDER}"),
    }, routes


@pytest.mark.parametrize("name", TZ_EVENT_NAMES)
def test_batch_inference_event_is_well_formed(name: str) -> None:
    event = kit.load_event(name)
    headers, context = kit.check_http_api_event(event)
    assert event["rawPath"].startswith("/batch_inference")
    assert event["isBase64Encoded"] is False
    if context["http"]["method"] == "POST":
        assert headers["content-type"] == "application/json"
        assert headers["content-length"] == str(len(event["body"].encode()))
        body = json.loads(event["body"])
        # Every per-item list is as long as `inputs`, or the batches function answers 400.
        inputs = len(body["inputs"])
        assert inputs >= 1
        per_item = [body[k] for k in ("episode_ids", "tags") if k in body]
        per_item += list(body.get("params", {}).get("chat_completion", {}).values())
        assert all(len(values) == inputs for values in per_item), body
    else:
        assert not event.get("body") and "content-length" not in headers


def path_pattern(path: str) -> re.Pattern[str]:
    """An HttpApi route path as a pattern: `{name}` is one segment, `{name+}` the rest."""
    segments = []
    for segment in path.strip("/").split("/"):
        if segment.startswith("{") and segment.endswith("+}"):
            segments.append(".+")
        elif segment.startswith("{") and segment.endswith("}"):
            segments.append("[^/]+")
        else:
            segments.append(re.escape(segment))
    return re.compile("/" + "/".join(segments))


def template_routes(function: str) -> list[tuple[str, re.Pattern[str]]]:
    """The HttpApi routes template.yaml gives `function`: method and path pattern."""
    from samcli.yamlhelper import yaml_parse  # noqa: PLC0415 - only this test needs the SAM CLI

    events = yaml_parse(kit.TEMPLATE.read_text())["Resources"][function]["Properties"]["Events"]
    return [
        (event["Properties"]["Method"], path_pattern(event["Properties"]["Path"]))
        for event in events.values()
        if event["Type"] == "HttpApi"
    ]


@pytest.mark.parametrize("name", HTTP_EVENT_NAMES)
def test_event_route_is_declared_in_the_template(name: str) -> None:
    """API Gateway hands the batches function only the routes template.yaml declares for it."""
    event = kit.load_event(name)
    method, path = event["requestContext"]["http"]["method"], event["rawPath"]
    routes = template_routes("NimbusBatchesFunction")
    assert any(m == method and p.fullmatch(path) for m, p in routes), f"{method} {path} is not routed to the function"


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
    kind, fields, queue = WORKER_JOBS[name]
    assert job["job"] == kind and set(job) == fields, job
    assert all(job[key] == placeholder for key, placeholder in ID_PLACEHOLDERS.items() if key in job), job
    # The ARN names the queue's logical id, as CloudFormation names the queues it creates.
    assert f"-{queue}-" in record["eventSourceARN"].rsplit(":", 1)[1], record["eventSourceARN"]
    assert queue in worker_event_sources(), f"the worker has no event source for {queue}"


def worker_event_sources() -> dict[str, dict]:
    """The SQS event source mappings template.yaml gives the worker, by queue (logical id)."""
    from samcli.yamlhelper import yaml_parse  # noqa: PLC0415 - only these tests need the SAM CLI

    resources = yaml_parse(kit.TEMPLATE.read_text())["Resources"]
    sources = {}
    for resource in resources.values():
        if resource["Type"] != "AWS::Lambda::EventSourceMapping":
            continue
        properties = resource["Properties"]
        if properties["FunctionName"] != {"Ref": "NimbusWorkerFunction"}:
            continue
        target = properties["EventSourceArn"]["Fn::GetAtt"]
        target = target if isinstance(target, list) else target.split(".")
        sources[target[0]] = properties
    return sources


def test_each_priority_queue_feeds_the_worker_with_its_own_concurrency() -> None:
    from samcli.yamlhelper import yaml_parse  # noqa: PLC0415

    template = yaml_parse(kit.TEMPLATE.read_text())
    resources, parameters = template["Resources"], template["Parameters"]
    jobs_queue = resources["NimbusJobsQueue"]["Properties"]
    sources = worker_event_sources()
    for level, default in ((0, 10), (1, 5), (2, 2)):
        name = f"AsyncQueueP{level}"
        source = sources[name]
        assert source["BatchSize"] == 1 and source["FunctionResponseTypes"] == ["ReportBatchItemFailures"], source
        parameter = source["ScalingConfig"]["MaximumConcurrency"]["Ref"]
        assert parameter == f"AsyncP{level}MaxConcurrency"
        assert parameters[parameter]["Default"] == default and parameters[parameter]["MinValue"] == 2
        queue = resources[name]["Properties"]
        # Longer than the 72 h a request may wait in the queue.
        assert queue["MessageRetentionPeriod"] == 345600 > 72 * 3600
        assert queue["VisibilityTimeout"] == jobs_queue["VisibilityTimeout"]
        assert queue["RedrivePolicy"]["maxReceiveCount"] == jobs_queue["RedrivePolicy"]["maxReceiveCount"]
        dead_letters = queue["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"]
        dead_letters = dead_letters if isinstance(dead_letters, list) else dead_letters.split(".")
        assert dead_letters[0] == f"{name}DeadLetterQueue" and dead_letters[0] in resources
        # The functions that send jobs know every priority queue's URL.
        for function in ("NimbusBatchesFunction", "NimbusWorkerFunction", "NimbusPollerFunction"):
            variables = resources[function]["Properties"]["Environment"]["Variables"]
            assert variables[f"NIMBUS_ASYNC_QUEUE_URL_P{level}"] == {"Ref": name}, function


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
    if name in TZ_EVENT_NAMES:
        # TensorZero's routes answer in its shape: {"error": "<message>"}.
        assert isinstance(body["error"], str) and "key" in body["error"].lower(), body
        return
    if name in ASYNC_EVENT_NAMES:
        # Baseten's shape: {"error": "<message>", "code": "<CODE>"}.
        assert isinstance(body["error"], str) and body["code"] == "UNAUTHORIZED", body
        return
    assert body["error"]["code"] == "invalid_api_key", body


def test_missing_authorization_is_rejected(batches_lambda: kit.LambdaUnderRie) -> None:
    status, body = invoke_json(batches_lambda, kit.without_authorization(kit.load_event("batches-list.json")))
    assert status == 401, body


@pytest.mark.parametrize("name", BATCH_WORKER_EVENT_NAMES)
def test_worker_drops_a_job_of_an_unknown_batch(worker_lambda: kit.LambdaUnderRie, name: str) -> None:
    assert invoke_worker(worker_lambda, kit.load_event(name)) == set(), "a job of no batch must not be retried"


@pytest.mark.parametrize("name", OTHER_WORKER_EVENT_NAMES)
def test_worker_runs_async_and_webhook_jobs_and_drops_those_of_nothing(
    worker_lambda: kit.LambdaUnderRie, name: str
) -> None:
    """Every job family has its runner in the worker (a family without one would be handed back
    for a retry): a job of an unknown request or delivery is done, not retried."""
    assert invoke_worker(worker_lambda, kit.load_event(name)) == set(), "a job of nothing must not be retried"


@pytest.mark.parametrize("name", POLLER_EVENT_NAMES)
def test_poller_event_returns_a_report(poller_lambda: kit.LambdaUnderRie, name: str) -> None:
    report = poller_lambda.invoke(kit.load_event(name), timeout=WORKER_TIMEOUT_S + 30)
    assert isinstance(report, dict) and set(report) == {"tasks", "errors"}, f"not a scheduler report: {report!r}"
    assert report["errors"] == 0, report
    # Each scheduled task's own counters.
    assert set(report["tasks"]) >= {"files_sweep", "batches"}, report
    assert set(report["tasks"]["files_sweep"]) == {"tasks_run", "tasks_failed"}, report
    assert set(report["tasks"]["batches"]) == {
        "active_batches",
        "finalized",
        "validations_requeued",
        "provider_batches_polled",
        "chunks_requeued",
        "errors",
    }, report
    for counters in report["tasks"].values():
        assert all(isinstance(count, int) and count >= 0 for count in counters.values()), report
    assert report["tasks"]["batches"]["errors"] == 0, report


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

