"""The AWS requests of one batch on the AWS path, recorded by a moto server of their own, and whether
the policies template.yaml gives each function (`nimbus-files`, `nimbus-batches`, `nimbus-worker`,
`nimbus-poller` under the RIE) allow them, `dynamodb:LeadingKeys` conditions included: `/v1/batches` batches and TensorZero's `/batch_inference`
ones. Helpers in batch_lambda_kit.py.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
import requests

import nimbus_testkit as kit
from batch_lambda_kit import (
    FAILING_FUNCTION,
    PROJECT,
    WORKER_TIMEOUT_S,
    Api,
    EventSource,
    chat_line,
    check_results,
    config_with_failing_function,
    invoke_worker,
    jsonl,
    run_batch_inference_until_done,
    run_until,
)


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
            elif not (isinstance(policy, dict) and "Fn::If" in policy):  # the ConfigFromS3 branch
                raise AssertionError(f"{name}: a policy this test cannot read: {policy!r}")
        policies[name] = statements
    return policies


QUEUE_SYMBOLS = {
    "NimbusJobsQueue": "queue",
    "AsyncQueueP0": "queue_p0",
    "AsyncQueueP1": "queue_p1",
    "AsyncQueueP2": "queue_p2",
}


def queue_symbol(queue_url: str) -> str:
    """The symbolic name of a queue of the test's moto server, from its URL (see `kit.MotoServer`)."""
    name = queue_url.rstrip("/").rsplit("/", 1)[-1]
    if name.startswith("nimbus-jobs-"):
        return "queue"
    match = re.fullmatch(r"nimbus-async-p([0-2])-\w+", name)
    assert match, f"a queue this test does not know: {queue_url}"
    return f"queue_p{match.group(1)}"


def resource_pattern(resource: Any) -> str:
    """`!GetAtt NimbusStateTable.Arn` → `table`, `!Sub "${NimbusBucket.Arn}/projects/*"` →
    `bucket/projects/*`, and so on (one symbolic name per ARN shape)."""
    if isinstance(resource, dict) and "Fn::GetAtt" in resource:
        target = resource["Fn::GetAtt"]
        target = target if isinstance(target, list) else target.split(".")
        symbols = {"NimbusStateTable": "table", "NimbusBucket": "bucket", "NimbusSealingKey": "sealing_key"}
        return {**symbols, **QUEUE_SYMBOLS}[target[0]]
    if isinstance(resource, dict) and "Fn::Sub" in resource:
        text = resource["Fn::Sub"]
        text = text.replace("${NimbusStateTable.Arn}", "table").replace("${NimbusBucket.Arn}", "bucket")
        return text
    raise AssertionError(f"unexpected resource in template.yaml: {resource!r}")


def leading_keys_allowed(statement: dict[str, Any], keys: list[str]) -> bool:
    """A statement's `dynamodb:LeadingKeys` condition (ForAllValues:StringLike) on the request's keys."""
    condition = (statement.get("Condition") or {}).get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys")
    if condition is None:
        return True
    patterns = condition if isinstance(condition, list) else [condition]
    return all(any(fnmatch.fnmatchcase(key, p) for p in patterns) for key in keys)


def allowed(
    statements: list[dict[str, Any]], action: str, resource: str, prefix: str | None, keys: list[str] | None = None
) -> bool:
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
        if not leading_keys_allowed(statement, keys or []):
            continue
        return True
    return False


SQS_BATCH_ACTIONS = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}


def dynamodb_key(item: dict[str, Any]) -> list[str]:
    """The partition key (`pk`) of a request's key or item."""
    return [item["pk"]["S"]] if "pk" in item else []


def dynamodb_actions(operation: str, payload: dict[str, Any]) -> list[tuple[str, str, None, list[str]]]:
    """(IAM action, resource, None, dynamodb:LeadingKeys) of one DynamoDB request: a transaction's
    items are authorized one by one, each with its own key; a Query's key is the value its key
    condition compares the (index's) partition key with."""
    if operation == "TransactWriteItems":
        kinds = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem"}
        return [
            (f"dynamodb:{kinds[kind]}", "table", None, dynamodb_key(body.get("Item") or body.get("Key") or {}))
            for item in payload.get("TransactItems", [])
            for kind, body in item.items()
        ]
    if operation == "Query":
        resource = f"table/index/{payload['IndexName']}" if payload.get("IndexName") else "table"
        values = payload.get("ExpressionAttributeValues", {})
        assert len(values) == 1, f"a Query this test cannot read: {payload}"
        return [("dynamodb:Query", resource, None, [value["S"] for value in values.values()])]
    if operation == "BatchGetItem":
        keys = [dynamodb_key(k)[0] for table in payload["RequestItems"].values() for k in table["Keys"]]
        return [("dynamodb:BatchGetItem", "table", None, keys)]
    return [(f"dynamodb:{operation}", "table", None, dynamodb_key(payload.get("Item") or payload.get("Key") or {}))]


def iam_actions(entry: dict[str, Any], bucket: str) -> list[tuple[Any, ...]]:
    """(IAM action, symbolic resource, s3:prefix[, dynamodb:LeadingKeys]) needed by one recorded request."""
    headers = {k.lower(): v for k, v in entry["headers"].items()}
    body = entry.get("body") or ""
    if entry.get("body_encoded"):
        body = base64.b64decode(body).decode(errors="replace")
    target = headers.get("x-amz-target", "")
    if target.startswith("DynamoDB_"):
        return dynamodb_actions(target.split(".", 1)[1], json.loads(body or "{}"))
    if target.startswith("AmazonSQS."):
        operation = target.split(".", 1)[1]
        queue_url = json.loads(body or "{}").get("QueueUrl", "")
        # IAM authorizes the batch operations with the single ones' actions.
        return [(f"sqs:{SQS_BATCH_ACTIONS.get(operation, operation)}", queue_symbol(queue_url), None)]
    if target.startswith("TrentService."):
        # KMS: the one key the functions use is the sealing key.
        return [(f"kms:{target.split('.', 1)[1]}", "sealing_key", None)]
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
        for action, resource, prefix, *keys in iam_actions(entry, bucket):
            counts[(function, action)] += 1
            leading = keys[0] if keys else []
            if not allowed(policies[function], action, resource, prefix, leading):
                denied.append(
                    f"{function}: {action} on {resource}"
                    + (f" (prefix {prefix})" if prefix else "")
                    + (f" (keys {', '.join(leading)})" if leading else "")
                )
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


@pytest.fixture(scope="module")
def recorded_failing_functions(
    recorded_stack: RecordedStack, batch_lambda_factory: Callable[..., kit.LambdaUnderRie]
) -> tuple[Api, EventSource]:
    """A batches function and a worker on the recorded moto whose config (read from S3 at their
    first invocation, before any recording) adds `FAILING_FUNCTION`; signed as the functions they
    stand for."""
    stack = recorded_stack
    config_source = stack.moto.put_config("recorded-failing", config_with_failing_function())
    started = {}
    for resource, binary, memory, timeout in (
        ("NimbusBatchesFunction", "nimbus-batches", "256", "30"),
        ("NimbusWorkerFunction", "nimbus-worker", "512", str(WORKER_TIMEOUT_S)),
    ):
        started[resource] = batch_lambda_factory(
            resource,
            binary,
            memory=memory,
            timeout=timeout,
            name=f"rie-recorded-failing-{binary.removeprefix('nimbus-')}",
            moto=stack.moto,
            extra_env={"AWS_ACCESS_KEY_ID": FUNCTION_KEYS[resource], "NIMBUS_CONFIG_SOURCE": config_source},
        )
    api = Api(stack.api.files, started["NimbusBatchesFunction"], stack.api.api_key)
    # Initialize both (the config is read then) with requests that change nothing.
    status, _ = api.poll_batch_inference(str(uuid.UUID(int=0)))
    assert status == 404
    assert invoke_worker(started["NimbusWorkerFunction"], kit.load_event("worker-sqs-chunk.json")) == set()
    return api, EventSource(stack.moto, started["NimbusWorkerFunction"], stack.source.poller)


def test_batch_inference_requests_are_allowed_by_the_template(
    recorded_stack: RecordedStack, recorded_failing_functions: tuple[Api, EventSource], logs_dir: Path
) -> None:
    """Two `/batch_inference` batches recorded from submit to the last poll: one that completes
    (items stored, records written, replies rebuilt from the records) and one whose every model call
    fails (its failures list written when it ends, and read when polled)."""
    stack = recorded_stack
    failing_api, failing_source = recorded_failing_functions
    stack.post("reset-recording")
    stack.post("start-recording")
    try:
        status, created = stack.api.submit_batch_inference()
        assert status == 200, created
        done = run_batch_inference_until_done(stack.api, stack.source, created["batch_id"])
        assert done["status"] == "completed", done
        for inference_id in (None, created["inference_ids"][0]):
            status, poll = stack.api.poll_batch_inference(created["batch_id"], inference_id)
            assert status == 200 and poll["status"] == "completed", poll
        status, failing = failing_api.submit_batch_inference(
            function_name=FAILING_FUNCTION,
            inputs=[{"messages": [{"role": "user", "content": "fails"}]}],
            episode_ids=None,
            tags=None,
            params=None,
        )
        assert status == 200, failing
        failed = run_batch_inference_until_done(failing_api, failing_source, failing["batch_id"])
        assert failed == {"status": "failed"}, failed
        status, detailed = failing_api.poll_batch_inference(failing["batch_id"], query={"include_failures": "true"})
        assert status == 200 and len(detailed["failed_inferences"]) == 1, detailed
        stack.source.poll()
    finally:
        stack.post("stop-recording")
    denied, counts = denied_requests(stack.recording(), stack.moto.bucket)
    (logs_dir / "batch-inference-aws-requests.json").write_text(
        json.dumps({f"{fn} {action}": n for (fn, action), n in sorted(counts.items())}, indent=2)
    )
    assert not denied, "template.yaml does not allow:\n" + "\n".join(denied)
    assert ("NimbusWorkerFunction", "dynamodb:PutItem") in counts, counts
