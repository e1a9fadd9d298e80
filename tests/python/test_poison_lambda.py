"""#26 C5–C7 on the AWS path: hostile JSON Schemas (a `$ref` chain thousands deep, numeric bounds
at the edge of `f64`) in `/batch_inference` items, `/v1/batches` lines and async `/inference`
requests, run by `nimbus-worker` under the Runtime Interface Emulator against moto (the tests play
the SQS event sources and the poller's schedule: batch_lambda_kit.py, async_lambda_kit.py).

A schema past the bounds is refused at submit (a 4xx naming the field); one already stored (as
before submit checked) fails its own item in the worker. The ones within the bounds that push the
dummy provider's schema-instance generator to its numeric limits run: each worker invocation must
answer (never a crashed runtime, never a job handed back for a retry), the normal work beside them
must complete, a hostile item completes or fails as its own item, and the batch ends. The worker's
runtime must never have panicked or exited.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

import nimbus_testkit as kit
from async_lambda_kit import Stack, sqs_event
from batch_lambda_kit import (
    PROJECT,
    Api,
    EventSource,
    check_output_line,
    chat_line,
    invoke_worker,
    jsonl,
    run_batch_inference_until_done,
    run_until,
)

# A json function with no output schema of its own, answered by the dummy provider (whose reply
# is an instance of the request's `output_schema`, made by the schema-instance generator).
JSON_FUNCTION = "poison_json"
_JSON_FUNCTION_TOML = f"""
[functions.{JSON_FUNCTION}]
type = "json"

[functions.{JSON_FUNCTION}.variants.only]
type = "chat_completion"
model = "dummy"
"""

# #26 C7: bounds whose arithmetic overflowed (a panic, in debug builds a closed connection).
OVERFLOW_RULES = [
    {"type": "integer", "minimum": 1e308},
    {"type": "integer", "maximum": -1e308},
    {"type": "integer", "minimum": 1e308, "maximum": -1e308},
    {"type": "number", "multipleOf": 1e-300, "minimum": 1},
]
# What a panicking or aborting runtime leaves in the RIE's log.
CRASH_MARKS = ("panicked at", "fatal runtime error", "Runtime.ExitError", "stack overflow")


def ref_chain(depth: int) -> dict[str, Any]:
    """#26 C5/C6: `d0 → d1 → … → d{depth}`, the last an object (≈100 KB at 3,000)."""
    defs: dict[str, Any] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(depth)}
    defs[f"d{depth}"] = {"type": "object"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def overflow_schemas() -> list[dict[str, Any]]:
    """Each rule bare and as a required property of an object."""
    return [
        schema
        for rule in OVERFLOW_RULES
        for schema in (rule, {"type": "object", "properties": {"n": rule}, "required": ["n"]})
    ]


def message_input(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def assert_no_crash(worker: kit.LambdaUnderRie) -> None:
    log = worker.process.log_path.read_text(errors="replace")
    marks = [mark for mark in CRASH_MARKS if mark in log]
    assert not marks, f"the worker's runtime crashed ({marks}):\n{worker.process.log_text()}"


@pytest.fixture(scope="module")
def poison(
    moto: kit.MotoServer,
    batch_lambda_factory: Callable[..., kit.LambdaUnderRie],
    poller_lambda: kit.LambdaUnderRie,
    api: Api,
) -> tuple[Api, EventSource, Stack]:
    """A batches function and a worker of their own, whose config (from S3) adds `JSON_FUNCTION`;
    the session's moto, files function, poller and key."""
    config = f"{kit.DEFAULT_CONFIG.read_text().rstrip()}\n{_JSON_FUNCTION_TOML}"
    env = {"NIMBUS_CONFIG_SOURCE": moto.put_config("poison", config)}
    batches = batch_lambda_factory(
        "NimbusBatchesFunction", "nimbus-batches", memory="256", timeout="30", name="rie-poison-batches", extra_env=env
    )
    worker = batch_lambda_factory(
        "NimbusWorkerFunction", "nimbus-worker", memory="512", timeout="300", name="rie-poison-worker", extra_env=env
    )
    return (
        Api(api.files, batches, api.api_key),
        EventSource(moto, worker, poller_lambda),
        Stack(moto, batches, worker, poller_lambda, api.api_key, api.api_key),
    )


def test_poison_batch_inference_items_fail_alone(poison: tuple[Api, EventSource, Stack]) -> None:
    api, source, _ = poison
    # C6: the `$ref` chain is refused at submit, naming the field: no worker ever sees it.
    status, refused = api.submit_batch_inference(
        function_name=JSON_FUNCTION,
        inputs=[message_input("normal"), message_input("chain")],
        output_schemas=[None, ref_chain(3_000)],
        episode_ids=None,
        tags=None,
        params=None,
    )
    assert 400 <= status < 500, (status, refused)
    assert "output_schema" in json.dumps(refused), refused

    hostile = overflow_schemas()
    schemas: list[dict[str, Any] | None] = [None, *hostile, None]
    inputs = [message_input(f"item {i}") for i in range(len(schemas))]
    status, created = api.submit_batch_inference(
        function_name=JSON_FUNCTION, inputs=inputs, output_schemas=schemas, episode_ids=None, tags=None, params=None
    )
    assert status == 200, created
    batch_id, ids = created["batch_id"], created["inference_ids"]
    normal_ids = {ids[0], ids[-1]}

    done = run_batch_inference_until_done(api, source, batch_id, timeout=60, no_retries=True)
    assert done["status"] == "completed", done
    jobs = source.jobs_for(batch_id)
    assert {d.job["job"] for d in jobs} >= {"validate", "chunk"}, [d.job for d in jobs]
    assert not any(d.failed for d in jobs), [d.job for d in jobs]
    assert_no_crash(source.worker)

    answered = {reply["inference_id"]: reply for reply in done["inferences"]}
    assert normal_ids <= set(answered), done
    for inference_id in normal_ids:
        output = answered[inference_id]["output"]
        assert isinstance(output["raw"], str) and output["raw"], answered[inference_id]
    # Every hostile item either completed or failed as its own item, exactly once.
    status, detailed = api.poll_batch_inference(batch_id, query={"include_failures": "true"})
    assert status == 200, detailed
    failed = {f["inference_id"]: f for f in detailed["failed_inferences"]}
    assert not set(failed) & normal_ids, failed
    assert sorted([*answered, *failed]) == sorted(ids), (answered.keys(), failed.keys())
    assert all(isinstance(f["error"], str) and f["error"] for f in failed.values()), failed


def test_poison_v1_batches_lines_fail_alone(poison: tuple[Api, EventSource, Stack]) -> None:
    """Chat lines whose `response_format` carries the overflow schemas, on the dummy model (whose
    answer the schema-instance generator makes), between two normal lines."""
    api, source, _ = poison
    hostile = {
        f"hostile-{i}": {
            "custom_id": f"hostile-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "dummy",
                "messages": kit.user("a number, please"),
                "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
            },
        }
        for i, schema in enumerate(overflow_schemas())
    }
    lines = [chat_line("normal-first"), *hostile.values(), chat_line("normal-last")]
    batch = api.create_ok(api.upload(jsonl(lines))["id"])
    batch = run_until(api, source, batch["id"], timeout=60, no_retries=True)
    jobs = source.jobs_for(batch["id"])
    assert not any(d.failed for d in jobs), [(d.job, d.failed) for d in jobs]
    assert_no_crash(source.worker)

    assert batch["status"] == "completed", batch
    assert batch["request_counts"]["total"] == len(lines), batch
    output, errors = api.results(batch)
    out_ids = [line["custom_id"] for line in output]
    err_ids = [line["custom_id"] for line in errors]
    assert {"normal-first", "normal-last"} <= set(out_ids), (out_ids, err_ids)
    assert sorted(out_ids + err_ids) == sorted(line["custom_id"] for line in lines), (out_ids, err_ids)
    assert batch["request_counts"]["completed"] == len(out_ids), batch
    for line in output:
        check_output_line(line)
    for line in errors:
        assert line["custom_id"] in hostile and line["response"]["status_code"] >= 400, line


def test_poison_async_request_leaves_the_invocations_other_work(poison: tuple[Api, EventSource, Stack]) -> None:
    """Async `/inference` requests with the overflow schemas and a normal one, their jobs handed to
    the worker in one invocation (hostile first); then a normal one in the next invocation of the
    same emulator."""
    _, _, stack = poison

    def submit(*, output_schema: dict[str, Any] | None = None) -> tuple[int, Any]:
        model_input: dict[str, Any] = {"function_name": JSON_FUNCTION, "input": message_input("async item")}
        if output_schema is not None:
            model_input["output_schema"] = output_schema
        return stack.submit(
            endpoint="/inference",
            model_input=model_input,
            webhook_endpoint=None,
            priority=1,
            inference_retry_config={"max_attempts": 1},
        )

    status, refused = submit(output_schema=ref_chain(3_000))
    assert status == 400, refused
    assert refused["code"] == "MODEL_INVALID_INPUT" and refused["field"].startswith("model_input"), refused
    assert "`output_schema`" in refused["error"], refused

    def submit_ok(**changes: Any) -> str:
        status, answer = submit(**changes)
        assert status == 200, answer
        return answer["request_id"]

    hostile = [submit_ok(output_schema=schema) for schema in overflow_schemas()[:4]]
    normal = submit_ok()
    messages = [stack.receive_job(1, request_id) for request_id in [*hostile, normal]]
    event = {"Records": [sqs_event(message, stack.arns[1])["Records"][0] for message in messages]}
    assert invoke_worker(stack.worker, event) == set(), "a job was handed back for a retry"
    for message in messages:
        stack.sqs.delete_message(QueueUrl=stack.moto.async_queue_urls[1], ReceiptHandle=message["ReceiptHandle"])

    after = submit_ok()
    stack.run_job(1, after)
    assert_no_crash(stack.worker)

    for request_id in (normal, after):
        answer = stack.status_ok(request_id)
        assert answer["status"] == "SUCCEEDED", answer
        assert answer["output"]["output"]["raw"], answer
    for request_id in hostile:
        answer = stack.status_ok(request_id)
        assert answer["status"] in {"SUCCEEDED", "FAILED"}, answer
        if answer["status"] == "FAILED":
            assert answer["errors"], answer



def test_a_stored_ref_chain_fails_its_item_alone(poison: tuple[Api, EventSource, Stack], moto: kit.MotoServer) -> None:
    """A `$ref` chain already in a stored batch (as one submitted before submit checked the bounds):
    the worker's bounded validation makes it that item's failure; its neighbours complete."""
    api, source, _ = poison
    inputs = [message_input(f"stored {i}") for i in range(3)]
    schemas = [None, {"type": "object"}, None]
    status, created = api.submit_batch_inference(
        function_name=JSON_FUNCTION, inputs=inputs, output_schemas=schemas, episode_ids=None, tags=None, params=None
    )
    assert status == 200, created
    batch_id, ids = created["batch_id"], created["inference_ids"]
    s3 = moto.client("s3")
    key = f"batch_inference/{PROJECT}/{batch_id}/items.jsonl"
    items = [json.loads(line) for line in s3.get_object(Bucket=moto.bucket, Key=key)["Body"].read().decode().splitlines()]
    assert items[1]["request"]["output_schema"] == {"type": "object"}, items[1]
    items[1]["request"]["output_schema"] = ref_chain(3_000)
    s3.put_object(Bucket=moto.bucket, Key=key, Body=jsonl(items))

    done = run_batch_inference_until_done(api, source, batch_id, timeout=60, no_retries=True)
    assert_no_crash(source.worker)
    assert done["status"] == "completed", done
    assert [reply["inference_id"] for reply in done["inferences"]] == [ids[0], ids[2]], done
    status, detailed = api.poll_batch_inference(batch_id, query={"include_failures": "true"})
    assert status == 200, detailed
    [failed] = detailed["failed_inferences"]
    assert failed["inference_id"] == ids[1] and "output_schema" in failed["error"], failed
