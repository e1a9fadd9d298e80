"""Provider-native batches on the AWS path (issue #13): `nimbus-batches`, `nimbus-worker` and
`nimbus-poller` under the RIE against moto (DynamoDB, S3, SQS, and KMS sealing the per-line
credentials), with a second Nimbus (a local server) as the upstream provider. The tests play the
SQS event source and the EventBridge schedule (batch_lambda_kit.py); the poller, never a client
GET, polls the upstream batches.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import nimbus_testkit as kit
from batch_lambda_kit import PROJECT, Api, EventSource, check_output_line, jsonl, run_until
from native_batch_kit import (
    DYNAMIC_CREDENTIAL,
    UPSTREAM_KEY_ENV,
    NativeUpstream,
    downstream_config,
    upstream_line_texts,
)
from native_batch_kit import fake_provider, upstream  # noqa: F401 - fixtures
from mock_batch_upstream import FakeBatchUpstream

WORKER_TIMEOUT = "300"


@pytest.fixture(scope="module")
def native_aws(
    moto: kit.MotoServer,
    batch_lambda_factory: Callable[..., kit.LambdaUnderRie],
    files_lambda: kit.LambdaUnderRie,
    aws_api_key: dict[str, Any],
    upstream: NativeUpstream,
    fake_provider: FakeBatchUpstream,
) -> tuple[Api, EventSource]:
    """The batch functions on the native config (read from S3), the upstream's key in their
    environment and a KMS key (moto) sealing dynamic credentials."""
    source_uri = moto.put_config("native-downstream", downstream_config(upstream.relay.api_base, fake_provider))
    key_id = moto.client("kms").create_key(Description="nimbus sealing (test)")["KeyMetadata"]["KeyId"]
    env = {
        "NIMBUS_CONFIG_SOURCE": source_uri,
        UPSTREAM_KEY_ENV: upstream.key,
        "NIMBUS_SEALING_KEY_ID": key_id,
        "NIMBUS_ALLOW_SHORT_COMPLETION_WINDOWS": "1",
    }

    def start(resource: str, binary: str, memory: str, timeout: str) -> kit.LambdaUnderRie:
        name = f"rie-native-{binary.removeprefix('nimbus-')}"
        return batch_lambda_factory(resource, binary, memory=memory, timeout=timeout, name=name, extra_env=env)

    batches = start("NimbusBatchesFunction", "nimbus-batches", "256", "30")
    worker = start("NimbusWorkerFunction", "nimbus-worker", "512", WORKER_TIMEOUT)
    poller = start("NimbusPollerFunction", "nimbus-poller", "256", "300")
    return Api(files_lambda, batches, aws_api_key["api_key"]), EventSource(moto, worker, poller)


def stored_anywhere(moto: kit.MotoServer, needle: str, *, except_keys: set[str]) -> list[str]:
    """Where `needle` is stored in the clear: DynamoDB items and S3 objects (but `except_keys`)."""
    found = []
    dynamodb = moto.client("dynamodb")
    for page in dynamodb.get_paginator("scan").paginate(TableName=moto.table):
        for item in page["Items"]:
            if needle in repr(item):
                found.append(f"dynamodb: {item.get('pk')}")
    s3 = moto.client("s3")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=moto.bucket):
        for entry in page.get("Contents", []):
            if entry["Key"] in except_keys:
                continue
            if needle.encode() in s3.get_object(Bucket=moto.bucket, Key=entry["Key"])["Body"].read():
                found.append(f"s3: {entry['Key']}")
    return found


def test_a_mixed_batch_runs_native_lines_upstream_on_the_aws_path(
    native_aws: tuple[Api, EventSource], upstream: NativeUpstream, moto: kit.MotoServer
) -> None:
    api, source = native_aws
    bad_key = f"sk-not-a-key-{uuid.uuid4().hex}"
    good = {"credentials": {DYNAMIC_CREDENTIAL: upstream.key}}
    lines = [
        kit.chat_line("aws-native-1", "aws native one", model="cheap"),
        kit.chat_line("aws-local", "aws local", model="local"),
        kit.chat_line("aws-native-2", "aws native two", model="cheap"),
        kit.chat_line("aws-failing", "fails upstream", model="cheap-failing"),
        kit.chat_line("aws-dynamic", "on the key it carries", model="cheap-dynamic", **good),
        kit.chat_line("aws-bad-key", "on a key the upstream refuses", model="cheap-dynamic", credentials={DYNAMIC_CREDENTIAL: bad_key}),
    ]
    file = api.upload(jsonl(lines))
    batch = api.create_ok(file["id"])
    done = run_until(api, source, batch["id"], timeout=120)
    assert done["status"] == "completed", done
    assert done["request_counts"] == {"total": 6, "completed": 4, "failed": 2}, done
    output, errors = api.results(done)
    by_id = {entry["custom_id"]: entry for entry in output + errors}
    assert sorted(by_id) == sorted(entry["custom_id"] for entry in lines)
    assert sorted(entry["custom_id"] for entry in output) == ["aws-dynamic", "aws-local", "aws-native-1", "aws-native-2"]
    for entry in output:
        check_output_line(entry)
    model_of = {entry["custom_id"]: entry["body"]["model"] for entry in lines}
    for entry in output:
        assert entry["response"]["body"]["model"] == model_of[entry["custom_id"]], entry
    assert by_id["aws-failing"]["response"]["status_code"] == 500, by_id["aws-failing"]
    assert by_id["aws-bad-key"]["error"]["code"] == "provider_file_rejected", by_id["aws-bad-key"]

    # Upstream: one batch per group (cheap, cheap-failing, cheap-dynamic on the good key), each
    # made of exactly its lines; the poller did the polling.
    parts = upstream.parts_of(done["id"])
    assert len(parts) == 3, parts
    sent = [upstream.sent(done["id"], int(p.metadata["nimbus_part"]))[1] for p in parts]
    assert sorted(upstream_line_texts(s)[0] for s in sent) == sorted(
        ["aws native one", "fails upstream", "on the key it carries"]
    ), sent
    polled = sum(report.get("tasks", {}).get("batches", {}).get("provider_batches_polled", 0) for report in source.poll_reports)
    assert polled >= 3, source.poll_reports[-3:]
    kinds = {d.job["job"] for d in source.jobs_for(done["id"])}
    assert "native" in kinds, kinds

    # Neither key is stored in the clear anywhere but in the user's own input file.
    input_key = f"projects/{PROJECT}/files/{file['id']}"
    for key in (upstream.key, bad_key):
        assert stored_anywhere(moto, key, except_keys={input_key}) == []



def run_until_upstream_finished(
    api: Api, source: EventSource, upstream: NativeUpstream, batch_id: str, lines: int, timeout: float = 60
) -> Any:
    """Deliver jobs and play the schedule until the upstream batch of `batch_id` has finished at
    least `lines` lines; that upstream batch."""
    found: list[Any] = []

    def upstream_progress(_: dict[str, Any]) -> bool:
        found[:] = upstream.parts_of(batch_id)
        return bool(found) and (found[0].request_counts.completed or 0) >= lines

    run_until(api, source, batch_id, until=upstream_progress, timeout=timeout)
    return found[0]


def stopped_batch_results(
    api: Api, done: dict[str, Any], upstream: NativeUpstream, part_id: str, lines: list[dict[str, Any]], code: str
) -> None:
    """A batch stopped while its upstream batch ran: the upstream batch stopped too; what it finished
    is in the output (no more, no less), every other line once in the error file with `code`."""
    part = upstream.wait(part_id, timeout=15)
    assert part.status in {"cancelled", "expired"}, part
    output, errors = api.results(done)
    assert sorted(e["custom_id"] for e in output + errors) == sorted(e["custom_id"] for e in lines)
    assert len(output) == part.request_counts.completed, (len(output), part.request_counts)
    assert 0 < len(output) < len(lines), output
    for entry in output:
        check_output_line(entry)
        assert entry["response"]["body"]["model"] == "cheap-slow", entry
    for entry in errors:
        assert entry["response"] is None and entry["error"]["code"] == code, entry
    # Every error line is one the stop left unrun: Nimbus's `not_run` beside OpenAI's counts.
    expected = {"total": len(lines), "completed": len(output), "failed": len(errors), "not_run": len(errors)}
    assert done["request_counts"] == expected, done


def test_cancel_on_the_aws_path_cancels_the_upstream_batch_and_keeps_its_results(
    native_aws: tuple[Api, EventSource], upstream: NativeUpstream
) -> None:
    api, source = native_aws
    lines = [kit.chat_line(f"aws-cancel-{i}", f"aws slow line {i}", model="cheap-slow") for i in range(10)]
    batch = api.create_ok(api.upload(jsonl(lines))["id"])
    part = run_until_upstream_finished(api, source, upstream, batch["id"], 2)
    status, cancelling = api.cancel(batch["id"])
    assert status == 200 and cancelling["status"] == "cancelling", cancelling
    done = run_until(api, source, batch["id"], timeout=60)
    assert done["status"] == "cancelled", done
    stopped_batch_results(api, done, upstream, part.id, lines, "batch_cancelled")


def end_window_soon(moto: kit.MotoServer, batch_id: str, *, in_s: int) -> None:
    """Move a stored batch's `expires_at` to `in_s` seconds from now, in place in the table, with a
    new version so that no write made on the old one lands."""
    dynamodb = moto.client("dynamodb")
    key = {"pk": {"S": f"batch#{batch_id}"}}
    item = dynamodb.get_item(TableName=moto.table, Key=key, ConsistentRead=True)["Item"]
    body = json.loads(item["body"]["S"])
    body["batch"]["expires_at"] = int(time.time()) + in_s
    item["body"] = {"S": json.dumps(body)}
    item["version"] = {"N": str(int(item["version"]["N"]) + 1)}
    dynamodb.put_item(TableName=moto.table, Item=item)


def test_expiry_on_the_aws_path_stops_the_upstream_batch_and_keeps_its_results(
    native_aws: tuple[Api, EventSource], upstream: NativeUpstream, moto: kit.MotoServer
) -> None:
    api, source = native_aws
    lines = [kit.chat_line(f"aws-expire-{i}", f"aws slow line to expire {i}", model="cheap-slow") for i in range(12)]
    batch = api.create_ok(api.upload(jsonl(lines))["id"])
    part = run_until_upstream_finished(api, source, upstream, batch["id"], 1)
    # Deployed, windows are 24 h at least: move this one's end close instead.
    end_window_soon(moto, batch["id"], in_s=2)
    done = run_until(api, source, batch["id"], timeout=60)
    assert done["status"] == "expired", done
    stopped_batch_results(api, done, upstream, part.id, lines, "batch_expired")
