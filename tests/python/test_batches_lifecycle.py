"""Batches run end to end on the local server with the real OpenAI SDK: upload an input file,
`batches.create`, poll `batches.retrieve` until the batch is terminal, download the output and
error files with `files.content`.

Covers the happy path (chat and embeddings), per-line provider failures (`dummy-error`) next to
successes, a batch whose every line fails, cancel during a run, and expiry of a short
(test-only) completion window. One server for the module, with the poller every second and
short completion windows allowed (`kit.BATCH_SERVER_ENV`).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import openai
import pytest
import requests

import nimbus_testkit as kit

DAY = 86_400
CHAT = "/v1/chat/completions"
EMBEDDINGS = "/v1/embeddings"
ERROR_KEYS = {"message", "type", "param", "code"}


server, sdk = kit.batch_server_fixtures("nimbus-batches-run")


def start_batch(
    sdk: openai.OpenAI,
    lines: list[dict[str, Any] | str],
    *,
    endpoint: str = CHAT,
    window: str = "24h",
    metadata: dict[str, str] | None = None,
) -> Any:
    input_file = kit.upload_batch_input(sdk, lines)
    extra = {} if metadata is None else {"metadata": metadata}
    batch = sdk.batches.create(
        input_file_id=input_file.id,
        endpoint=endpoint,  # type: ignore[arg-type]
        completion_window=window,  # type: ignore[arg-type]
        **extra,
    )
    assert batch.id.startswith("batch_") and len(batch.id) > len("batch_"), batch
    assert batch.object == "batch"
    assert batch.status == "validating", batch
    assert batch.endpoint == endpoint
    assert batch.input_file_id == input_file.id
    assert batch.completion_window == window
    return batch


def raw_batch(server: kit.NimbusServer, batch_id: str) -> dict[str, Any]:
    response = requests.get(f"{server.api_base}/batches/{batch_id}", timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def check_each_custom_id_once(custom_ids: list[str], output: list[dict], errors: list[dict]) -> None:
    seen = Counter(line["custom_id"] for line in output + errors)
    twice = {cid: n for cid, n in seen.items() if n > 1}
    assert not twice, f"custom_ids in the output/error files more than once: {twice}"
    assert set(seen) == set(custom_ids), (
        f"missing: {sorted(set(custom_ids) - set(seen))}, unexpected: {sorted(set(seen) - set(custom_ids))}"
    )


def check_line_ids(lines: list[dict]) -> None:
    ids = [line["id"] for line in lines]
    assert all(isinstance(i, str) and i.startswith("batch_req_") for i in ids), ids
    assert len(set(ids)) == len(ids), f"line ids repeat: {ids}"


def check_output_line(line: dict[str, Any], *, body_object: str = "chat.completion") -> dict[str, Any]:
    """An output line of a successful request; returns its response body."""
    assert set(line) == {"id", "custom_id", "response", "error"}, line
    assert line["id"].startswith("batch_req_"), line
    assert line["error"] is None, line
    response = line["response"]
    assert response["status_code"] == 200, line
    assert isinstance(response["request_id"], str) and response["request_id"].startswith("req_"), line
    body = response["body"]
    assert isinstance(body, dict) and body.get("object") == body_object, line
    return body


def check_provider_error_line(line: dict[str, Any]) -> dict[str, Any]:
    """An error-file line of a request the provider/model failed; returns `response.body.error`."""
    assert set(line) == {"id", "custom_id", "response", "error"}, line
    assert line["id"].startswith("batch_req_"), line
    assert line["error"] is None, line
    response = line["response"]
    assert isinstance(response, dict), line
    assert response["status_code"] >= 500, line
    error = response["body"]["error"]
    assert set(error) >= ERROR_KEYS, line
    assert isinstance(error["message"], str) and error["message"], line
    return error


def check_unrun_line(line: dict[str, Any], code: str) -> None:
    """An error-file line of a request that never ran (cancel, expiry)."""
    assert line["id"].startswith("batch_req_"), line
    assert line["response"] is None, line
    assert line["error"]["code"] == code, line
    assert isinstance(line["error"]["message"], str) and line["error"]["message"], line


def check_result_file(sdk: openai.OpenAI, batch: Any, file_id: str, kind: str) -> None:
    meta = sdk.files.retrieve(file_id)
    assert meta.purpose == "batch_output", meta
    # `batch_<hex>_output.jsonl`, as OpenAI names them: the batch id already starts with `batch_`.
    assert meta.filename == f"{batch.id}_{kind}.jsonl", meta
    assert meta.bytes == len(sdk.files.content(file_id).read()), meta


def check_usage_matches_lines(batch: Any, bodies: list[dict[str, Any]], *, chat: bool) -> None:
    usage = batch.usage
    assert usage is not None, batch
    prompt = sum(b["usage"]["prompt_tokens"] for b in bodies)
    total = sum(b["usage"]["total_tokens"] for b in bodies)
    completion = sum(b["usage"].get("completion_tokens", 0) for b in bodies) if chat else 0
    assert usage.input_tokens == prompt > 0, (usage, prompt)
    assert usage.output_tokens == completion, (usage, completion)
    if chat:
        assert usage.output_tokens > 0, usage
    assert usage.total_tokens == total == usage.input_tokens + usage.output_tokens > 0, (usage, total)
    assert usage.input_tokens_details is not None and isinstance(usage.input_tokens_details.cached_tokens, int)
    assert usage.output_tokens_details is not None and isinstance(usage.output_tokens_details.reasoning_tokens, int)


def check_completed_timestamps(batch: Any) -> None:
    assert batch.in_progress_at is not None and batch.finalizing_at is not None and batch.completed_at is not None
    assert batch.created_at <= batch.in_progress_at <= batch.finalizing_at <= batch.completed_at, batch
    assert batch.completed_at <= time.time() + 1
    assert batch.expires_at == batch.created_at + DAY, batch
    assert batch.failed_at is None and batch.expired_at is None, batch
    assert batch.cancelling_at is None and batch.cancelled_at is None, batch


# --------------------------------------------------------------------------------------------
# Happy paths
# --------------------------------------------------------------------------------------------


def test_chat_batch_end_to_end(server: kit.NimbusServer, sdk: openai.OpenAI) -> None:
    texts = {f"req-{i}": f"Say something about the number {i}." for i in range(6)}
    lines = [kit.chat_line(cid, text) for cid, text in texts.items()]
    created = start_batch(sdk, lines, metadata={"suite": "batches", "case": "e2e"})
    assert created.expires_at == created.created_at + DAY
    assert created.metadata == {"suite": "batches", "case": "e2e"}
    assert set(raw_batch(server, created.id)) >= kit.BATCH_KEYS

    batch = kit.wait_for_batch(sdk, created.id)
    assert batch.status == "completed", batch
    assert set(raw_batch(server, batch.id)) >= kit.BATCH_KEYS
    assert batch.errors is None, batch
    assert batch.metadata == created.metadata
    assert batch.created_at == created.created_at and batch.expires_at == created.expires_at
    assert batch.request_counts is not None
    assert batch.request_counts.model_dump() == {"total": 6, "completed": 6, "failed": 0}
    check_completed_timestamps(batch)
    assert batch.output_file_id is not None, batch
    assert batch.error_file_id is None, "no line failed, so there must be no error file"
    check_result_file(sdk, batch, batch.output_file_id, "output")
    assert batch.output_file_id in {f.id for f in sdk.files.list(purpose="batch_output")}

    output, errors = kit.batch_results(sdk, batch)
    assert errors == []
    check_each_custom_id_once(list(texts), output, errors)
    check_line_ids(output)
    bodies = [check_output_line(line) for line in output]
    request_ids = [line["response"]["request_id"] for line in output]
    assert len(set(request_ids)) == len(request_ids), request_ids

    # The dummy model is deterministic: each line got what a direct request gets.
    for line in output:
        body = line["response"]["body"]
        assert body["model"] == "dummy", body
        assert body["choices"][0]["message"]["role"] == "assistant"
        direct = sdk.chat.completions.create(model="dummy", messages=kit.user(texts[line["custom_id"]]))
        assert body["choices"][0]["message"]["content"] == direct.choices[0].message.content, line
        assert body["usage"]["prompt_tokens"] == direct.usage.prompt_tokens
        assert body["usage"]["completion_tokens"] == direct.usage.completion_tokens
    check_usage_matches_lines(batch, bodies, chat=True)

    # The input file is left as it was.
    assert sdk.files.content(batch.input_file_id).read() == kit.jsonl(lines)


def test_embeddings_batch(sdk: openai.OpenAI) -> None:
    inputs: dict[str, tuple[str | list[str], dict[str, Any]]] = {
        "emb-one": ("a single input", {}),
        "emb-two": (["first of two", "second of two"], {}),
        "emb-dims": ("eight dimensions", {"dimensions": 8}),
    }
    lines = [kit.embedding_line(cid, text, **extra) for cid, (text, extra) in inputs.items()]
    created = start_batch(sdk, lines, endpoint=EMBEDDINGS)
    batch = kit.wait_for_batch(sdk, created.id)
    assert batch.status == "completed", batch
    assert batch.request_counts.model_dump() == {"total": 3, "completed": 3, "failed": 0}
    check_completed_timestamps(batch)
    assert batch.error_file_id is None

    output, errors = kit.batch_results(sdk, batch)
    check_each_custom_id_once(list(inputs), output, errors)
    check_line_ids(output)
    bodies = []
    for line in output:
        body = check_output_line(line, body_object="list")
        bodies.append(body)
        text, extra = inputs[line["custom_id"]]
        expected_count = len(text) if isinstance(text, list) else 1
        assert body["model"] == "dummy-embedding", body
        assert [item["index"] for item in body["data"]] == list(range(expected_count)), body
        direct = sdk.embeddings.create(model="dummy-embedding", input=text, encoding_format="float", **extra)
        for item, expected in zip(body["data"], direct.data, strict=True):
            assert item["object"] == "embedding"
            # No encoding_format in the line: floats, as a direct request without one gets.
            assert isinstance(item["embedding"], list), item
            assert len(item["embedding"]) == extra.get("dimensions", 16)
            assert item["embedding"] == pytest.approx(expected.embedding), line["custom_id"]
    check_usage_matches_lines(batch, bodies, chat=False)


# --------------------------------------------------------------------------------------------
# Lines that fail
# --------------------------------------------------------------------------------------------


def test_failing_lines_go_to_the_error_file(sdk: openai.OpenAI) -> None:
    # Several models in one file is allowed.
    lines = [
        kit.chat_line("ok-dummy", "first"),
        kit.chat_line("bad-1", "fails", model="dummy-error"),
        kit.chat_line("ok-fallback", "second", model="dummy-fallback"),
        kit.chat_line("bad-2", "fails too", model="dummy-error"),
        kit.chat_line("ok-dummy-2", "third"),
    ]
    batch = kit.wait_for_batch(sdk, start_batch(sdk, lines).id)
    assert batch.status == "completed", batch
    assert batch.errors is None, "per-line failures are not validation errors"
    assert batch.request_counts.model_dump() == {"total": 5, "completed": 3, "failed": 2}
    check_completed_timestamps(batch)
    assert batch.output_file_id is not None and batch.error_file_id is not None, batch
    check_result_file(sdk, batch, batch.output_file_id, "output")
    check_result_file(sdk, batch, batch.error_file_id, "error")

    output, errors = kit.batch_results(sdk, batch)
    check_each_custom_id_once([line["custom_id"] for line in lines], output, errors)
    check_line_ids(output + errors)
    assert {line["custom_id"] for line in output} == {"ok-dummy", "ok-fallback", "ok-dummy-2"}
    assert {line["custom_id"] for line in errors} == {"bad-1", "bad-2"}
    models = {line["custom_id"]: check_output_line(line)["model"] for line in output}
    assert models == {"ok-dummy": "dummy", "ok-fallback": "dummy-fallback", "ok-dummy-2": "dummy"}
    for line in errors:
        check_provider_error_line(line)
        assert line["response"]["status_code"] == 500, line
    bodies = [line["response"]["body"] for line in output]
    check_usage_matches_lines(batch, bodies, chat=True)


def test_all_lines_failing_completes_without_output_file(sdk: openai.OpenAI) -> None:
    lines = [kit.chat_line(f"doomed-{i}", f"try {i}", model="dummy-error") for i in range(2)]
    batch = kit.wait_for_batch(sdk, start_batch(sdk, lines).id)
    assert batch.status == "completed", batch
    assert batch.output_file_id is None, batch
    assert batch.error_file_id is not None, batch
    assert batch.request_counts.model_dump() == {"total": 2, "completed": 0, "failed": 2}
    check_completed_timestamps(batch)
    output, errors = kit.batch_results(sdk, batch)
    check_each_custom_id_once([line["custom_id"] for line in lines], output, errors)
    check_line_ids(errors)
    for line in errors:
        check_provider_error_line(line)
    if batch.usage is not None:
        assert batch.usage.total_tokens == 0, batch.usage


# --------------------------------------------------------------------------------------------
# Cancel and expiry
# --------------------------------------------------------------------------------------------


def slow_lines(prefix: str, count: int) -> list[dict[str, Any]]:
    """`count` lines of `dummy-slow` (1 s each). With the default 16 lines in flight per chunk, 100
    lines take about 7 s and 160 about 10 s: long enough to cancel or expire them midway."""
    return [kit.chat_line(f"{prefix}-{i:03d}", f"slow request {i}", model="dummy-slow") for i in range(count)]


def check_partial_results(
    sdk: openai.OpenAI, batch: Any, lines: list[dict[str, Any]], unrun_code: str
) -> tuple[list[dict], list[dict]]:
    """Every line is accounted for exactly once: completed ones in the output file, the rest in
    the error file (never-run ones with `unrun_code`); request_counts match the files."""
    output, errors = kit.batch_results(sdk, batch)
    check_each_custom_id_once([line["custom_id"] for line in lines], output, errors)
    check_line_ids(output + errors)
    for line in output:
        check_output_line(line)
    # dummy-slow never fails: every error line is one that never ran.
    for line in errors:
        check_unrun_line(line, unrun_code)
    assert errors, f"no line in the error file has code {unrun_code}"
    counts = batch.request_counts
    assert counts.total == len(lines), counts
    assert counts.completed == len(output), (counts, len(output))
    assert counts.failed == len(errors), (counts, len(errors))
    assert counts.completed + counts.failed == counts.total, counts
    if output:
        assert batch.output_file_id is not None
        check_result_file(sdk, batch, batch.output_file_id, "output")
    else:
        assert batch.output_file_id is None, batch
    assert batch.error_file_id is not None
    check_result_file(sdk, batch, batch.error_file_id, "error")
    return output, errors


def test_cancel_during_a_run_keeps_partial_results(sdk: openai.OpenAI) -> None:
    lines = slow_lines("slow", 100)
    created = start_batch(sdk, lines)
    started = time.monotonic()

    def ready_to_cancel(batch: Any) -> bool:
        assert batch.status not in kit.BATCH_TERMINAL_STATUSES, f"finished before it could be cancelled: {batch!r}"
        completed = batch.request_counts.completed if batch.request_counts else 0
        return completed > 0 or (batch.status == "in_progress" and time.monotonic() - started >= 1.5)

    before = kit.wait_for_batch(sdk, created.id, until=ready_to_cancel, timeout=15)
    done_before_cancel = before.request_counts.completed if before.request_counts else 0

    cancelling = sdk.batches.cancel(created.id)
    assert cancelling.id == created.id
    assert cancelling.status == "cancelling", cancelling
    assert cancelling.cancelling_at is not None and cancelling.cancelling_at >= created.created_at
    assert cancelling.cancelled_at is None

    batch = kit.wait_for_batch(sdk, created.id, timeout=30)
    assert batch.status == "cancelled", batch
    assert batch.cancelling_at == cancelling.cancelling_at
    assert batch.cancelled_at is not None and batch.cancelling_at <= batch.cancelled_at, batch
    assert batch.completed_at is None and batch.failed_at is None and batch.expired_at is None, batch
    assert batch.in_progress_at is not None and batch.created_at <= batch.in_progress_at <= batch.cancelling_at

    output, _ = check_partial_results(sdk, batch, lines, "batch_cancelled")
    assert len(output) >= done_before_cancel, "results completed before the cancel were lost"
    assert len(output) < len(lines), "cancel stopped nothing"
    if output:
        bodies = [line["response"]["body"] for line in output]
        check_usage_matches_lines(batch, bodies, chat=True)

    # Cancelling again answers the batch unchanged.
    again = sdk.batches.cancel(created.id)
    assert again.status == "cancelled"
    assert again.cancelled_at == batch.cancelled_at


def test_expiry_of_a_short_window(sdk: openai.OpenAI) -> None:
    lines = slow_lines("exp", 160)
    created = start_batch(sdk, lines, window="3s")
    assert created.expires_at == created.created_at + 3, created

    batch = kit.wait_for_batch(sdk, created.id, timeout=30)
    assert batch.status == "expired", batch
    assert batch.expired_at is not None and batch.expired_at >= batch.expires_at, batch
    assert batch.completed_at is None and batch.cancelled_at is None and batch.failed_at is None, batch
    assert batch.in_progress_at is not None and batch.created_at <= batch.in_progress_at <= batch.expired_at

    output, _ = check_partial_results(sdk, batch, lines, "batch_expired")
    assert output, "lines completed before the expiry should be kept in the output file"
    bodies = [line["response"]["body"] for line in output]
    check_usage_matches_lines(batch, bodies, chat=True)
