"""TensorZero's `/batch_inference` on the AWS path: submitted and polled through `nimbus-batches`,
run by `nimbus-worker` (the tests play the SQS event source and the EventBridge schedule, as in
test_batches_lambda_flow.py), its records read back through `nimbus-inference`; all under the RIE
with moto, driven by the `infra/events/batches-batch-inference-*.json` files (helpers in
batch_lambda_kit.py).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

import nimbus_testkit as kit
from batch_lambda_kit import (
    FAILING_FUNCTION,
    PROJECT,
    TZ_SUBMIT_EVENT,
    WORKER_TIMEOUT_S,
    Api,
    EventSource,
    invoke_json,
    config_with_failing_function,
    run_batch_inference_until_done,
)

FINISH_REASONS = {"stop", "stop_sequence", "length", "tool_call", "content_filter", "unknown"}
REPLY_KEYS = {"inference_id", "episode_id", "variant_name", "content", "usage", "finish_reason"}


def submitted_body() -> dict[str, Any]:
    return json.loads(kit.load_event(TZ_SUBMIT_EVENT)["body"])


def is_uuid7(value: Any) -> bool:
    return isinstance(value, str) and uuid.UUID(value).version == 7


def submit_ok(api: Api, **changes: Any) -> dict[str, Any]:
    status, created = api.submit_batch_inference(**changes)
    assert status == 200, created
    assert set(created) == {"batch_id", "inference_ids", "episode_ids"}, created
    assert is_uuid7(created["batch_id"]), created
    assert all(is_uuid7(i) for i in created["inference_ids"] + created["episode_ids"]), created
    return created


def get_record(inference_lambda: kit.LambdaUnderRie, api_key: str, inference_id: str) -> tuple[int, Any]:
    """`GET /inferences/{id}` through the inference function, in the shape of its event files."""
    event = kit.with_api_key(kit.load_event("inference-models.json"), api_key)
    event["rawPath"] = event["requestContext"]["http"]["path"] = f"/inferences/{inference_id}"
    return invoke_json(inference_lambda, event)


def check_chat_reply(reply: dict[str, Any]) -> None:
    assert set(reply) == REPLY_KEYS, reply
    text = [block["text"] for block in reply["content"] if block["type"] == "text"]
    assert text and all(text), reply
    assert reply["usage"]["input_tokens"] > 0 and reply["usage"]["output_tokens"] > 0, reply
    assert reply["finish_reason"] in FINISH_REASONS, reply


# --------------------------------------------------------------------------------------------
# A batch through the functions
# --------------------------------------------------------------------------------------------


def test_batch_inference_runs_through_the_functions(
    api: Api, source: EventSource, moto: kit.MotoServer, inference_lambda: kit.LambdaUnderRie
) -> None:
    """The submit event as it is: pending until the worker ran the queued jobs, then completed with
    each item's `/inference` reply in input order; each item stored as an inference record that the
    inference function returns, with its per-item tags and params."""
    sent = submitted_body()
    created = submit_ok(api)
    batch_id = created["batch_id"]
    assert len(created["inference_ids"]) == len(created["episode_ids"]) == len(sent["inputs"]) == 2
    assert len(set(created["episode_ids"])) == 2, "each null episode id is minted anew"

    for inference_id in (None, created["inference_ids"][0]):
        status, poll = api.poll_batch_inference(batch_id, inference_id)
        assert (status, poll) == (200, {"status": "pending"}), "nothing runs before the worker takes its jobs"
    items = moto.client("s3").get_object(Bucket=moto.bucket, Key=f"batch_inference/{PROJECT}/{batch_id}/items.jsonl")
    stored = [json.loads(line) for line in items["Body"].read().decode().splitlines()]
    assert [line["inference_id"] for line in stored] == created["inference_ids"]

    done = run_batch_inference_until_done(api, source, batch_id)
    assert set(done) == {"status", "batch_id", "inferences"}, done
    assert done["status"] == "completed" and done["batch_id"] == batch_id, done
    assert [r["inference_id"] for r in done["inferences"]] == created["inference_ids"]
    assert [r["episode_id"] for r in done["inferences"]] == created["episode_ids"]
    for reply in done["inferences"]:
        check_chat_reply(reply)
    assert len({r["variant_name"] for r in done["inferences"]}) == 1, "one variant for the whole batch"
    jobs = source.jobs_for(batch_id)
    assert Counter(d.job["job"] for d in jobs) == {"validate": 1, "chunk": 1}, [d.job for d in jobs]
    assert not any(d.failed for d in jobs), "a job had to be retried"

    # Polled again: rebuilt from the records, the same; one item alone: a list of one.
    assert api.poll_batch_inference(batch_id) == (200, done)
    status, one = api.poll_batch_inference(batch_id, created["inference_ids"][1])
    assert status == 200, one
    assert one == {"status": "completed", "batch_id": batch_id, "inferences": [done["inferences"][1]]}

    params = sent["params"]["chat_completion"]
    for index, reply in enumerate(done["inferences"]):
        status, record = get_record(inference_lambda, api.api_key, reply["inference_id"])
        assert status == 200, record
        assert record["function_name"] == sent["function_name"], record
        assert record["variant_name"] == reply["variant_name"], record
        assert record["episode_id"] == reply["episode_id"], record
        assert record["input"] == sent["inputs"][index], record
        assert record["output"] == reply["content"], record
        assert record["tags"] == (sent["tags"][index] or {}), record
        chat_params = record["inference_params"]["chat_completion"]
        for name, values in params.items():
            if values[index] is not None:
                assert chat_params.get(name) == values[index], (name, record["inference_params"])
        assert record["model_calls"] and record["model_calls"][0]["raw_request"], record


def test_paging_through_the_lambda(api: Api, source: EventSource) -> None:
    """`limit` and `after` page the results in input order (how a batch too large for one Lambda
    response is fetched)."""
    body = submitted_body()
    inputs = [body["inputs"][i % 2] for i in range(5)]
    created = submit_ok(api, inputs=inputs, episode_ids=None, tags=None, params=None)
    run_batch_inference_until_done(api, source, created["batch_id"])
    seen: list[str] = []
    query = {"limit": "2"}
    while True:
        status, page = api.poll_batch_inference(created["batch_id"], query=query)
        assert status == 200, page
        assert page["status"] == "completed" and len(page["inferences"]) <= 2, page
        seen += [reply["inference_id"] for reply in page["inferences"]]
        if not page["has_more"]:
            assert "next_after" not in page or page["next_after"] is None, page
            break
        assert page["next_after"] == seen[-1], page
        query = {"limit": "2", "after": page["next_after"]}
    assert seen == created["inference_ids"]


def test_submissions_are_checked_by_the_batches_function(api: Api) -> None:
    body = submitted_body()
    status, reply = api.submit_batch_inference(tags=[None])
    assert status == 400, reply
    assert "`tags` has 1 entries but `inputs` has 2" in reply["error"], reply
    bad_input = json.loads(json.dumps(body["inputs"][1]))
    del bad_input["messages"][0]["content"][0]["arguments"]["topic"]
    status, reply = api.submit_batch_inference(inputs=[body["inputs"][0], bad_input])
    assert status == 400, reply
    assert reply["error"].startswith("Input at index 1 failed validation"), reply
    status, reply = api.submit_batch_inference(function_name="no_such_function")
    assert (status, reply) == (404, {"error": "Unknown function: no_such_function"})
    missing = str(uuid.UUID(int=0))
    status, reply = api.poll_batch_inference(missing)
    assert (status, reply) == (404, {"error": f"Batch not found: {missing}"})
    status, reply = api.poll_batch_inference("not-a-uuid")
    assert status == 400, reply


def test_another_projects_batch_is_404(api: Api, aws_cli: kit.NimbusCli) -> None:
    created = submit_ok(api)
    other = Api(api.files, api.batches, aws_cli.create_key("other-tz-batches", name="tz-batches-other")["api_key"])
    status, reply = other.poll_batch_inference(created["batch_id"])
    assert (status, reply) == (404, {"error": f"Batch not found: {created['batch_id']}"})
    status, reply = other.poll_batch_inference(created["batch_id"], created["inference_ids"][0])
    assert status == 404, reply
    # Nor is it an OpenAI batch of its own project.
    status, listing = invoke_json(api.batches, api.event("batches-list.json"))
    assert status == 200 and created["batch_id"] not in {b["id"] for b in listing["data"]}, listing


# --------------------------------------------------------------------------------------------
# A batch whose model calls fail (functions from a config in S3, as with ConfigSource=s3://…)
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def failing_stack(
    moto: kit.MotoServer,
    batch_lambda_factory: Callable[..., kit.LambdaUnderRie],
    poller_lambda: kit.LambdaUnderRie,
    api: Api,
) -> tuple[Api, EventSource]:
    """A batches function and a worker whose config (read from S3) adds `FAILING_FUNCTION`; the
    session's queue and poller."""
    config_source = moto.put_config("tz-failing", config_with_failing_function())
    env = {"NIMBUS_CONFIG_SOURCE": config_source}
    batches = batch_lambda_factory(
        "NimbusBatchesFunction", "nimbus-batches", memory="256", timeout="30", name="rie-tz-batches", extra_env=env
    )
    worker = batch_lambda_factory(
        "NimbusWorkerFunction",
        "nimbus-worker",
        memory="512",
        timeout=str(WORKER_TIMEOUT_S),
        name="rie-tz-worker",
        extra_env=env,
    )
    return Api(api.files, batches, api.api_key), EventSource(moto, worker, poller_lambda)


def test_a_batch_whose_calls_all_fail(failing_stack: tuple[Api, EventSource], moto: kit.MotoServer) -> None:
    """Every item's model call fails: the batch is exactly `{"status": "failed"}`; with
    `include_failures=true` each item's error, kept in the bucket beside the items."""
    api, source = failing_stack
    inputs = [{"messages": [{"role": "user", "content": f"item {i}"}]} for i in range(2)]
    created = submit_ok(api, function_name=FAILING_FUNCTION, inputs=inputs, episode_ids=None, tags=None, params=None)
    batch_id = created["batch_id"]
    assert run_batch_inference_until_done(api, source, batch_id) == {"status": "failed"}
    status, detailed = api.poll_batch_inference(batch_id, query={"include_failures": "true"})
    assert status == 200, detailed
    assert detailed["status"] == "failed" and detailed["inferences"] == [], detailed
    failed = detailed["failed_inferences"]
    assert [f["inference_id"] for f in failed] == created["inference_ids"], failed
    assert [f["episode_id"] for f in failed] == created["episode_ids"], failed
    assert all(isinstance(f["error"], str) and f["error"] for f in failed), failed
    status, one = api.poll_batch_inference(batch_id, created["inference_ids"][0])
    assert (status, one) == (200, {"status": "failed"})
    key = f"batch_inference/{PROJECT}/{batch_id}/failures.jsonl"
    lines = moto.client("s3").get_object(Bucket=moto.bucket, Key=key)["Body"].read().decode().splitlines()
    assert len(lines) == 2, lines
