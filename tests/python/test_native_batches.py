"""Provider-native batches end to end (issue #13), with a second Nimbus as the provider: lines of a
model whose provider has `batch = "native"` go to the upstream's Files and Batches API, the
downstream's scheduler polls the upstream batch, and the results come back in the downstream's
output and error files exactly as a worker-run batch's would. The downstream is only ever called
with the real OpenAI SDK (plain HTTP for `/batch_inference`); native_batch_kit.py starts both
servers and a scripted fake provider for what a real upstream will not do (reject an upload, lose a
batch).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import openai

import nimbus_testkit as kit
import tensorzero_kit as tzk
from batch_inference_kit import Gateway
from mock_batch_upstream import REJECT_MESSAGE, FakeBatchUpstream
from native_batch_kit import (
    DYNAMIC_CREDENTIAL,
    SPLIT_MAX_LINES,
    UNKNOWN_UPSTREAM_MODEL,
    NativeUpstream,
    text_of_line,
    upstream_line_texts,
    wait_for_parts,
)
from native_batch_kit import downstream, downstream_factory, fake_provider, sdk, split_downstream, split_sdk, upstream  # noqa: F401 - fixtures
from test_batches_lifecycle import (
    check_completed_timestamps,
    check_each_custom_id_once,
    check_line_ids,
    check_output_line,
    check_partial_results,
    check_provider_error_line,
    check_result_file,
    check_unrun_line,
    check_usage_matches_lines,
    start_batch,
)

CHAT = "/v1/chat/completions"
EMBEDDINGS = "/v1/embeddings"
DONE_WITHIN_S = 30


def custom_ids(lines: list[dict[str, Any]]) -> list[str]:
    return [line["custom_id"] for line in lines]


def check_upstream_part(upstream: NativeUpstream, part: Any, batch: Any, index: int, model_name: str) -> list[dict[str, Any]]:
    """An upstream batch of downstream `batch`: its metadata, endpoint and input file as the contract
    says; its input lines (model `model_name`, custom_ids Nimbus chose)."""
    assert part.metadata["nimbus_batch"] == batch.id, part.metadata
    assert part.metadata["nimbus_part"] == str(index), part.metadata
    assert part.endpoint == batch.endpoint, part
    file_id, lines, form = upstream.sent(batch.id, index)
    assert part.input_file_id == file_id, (part, file_id)
    assert form.get("purpose") == "batch", form
    assert lines, part
    for line in lines:
        assert line["body"]["model"] == model_name, line
        assert line["url"] == batch.endpoint, line
    return lines


def test_the_upstream_answers_its_own_batches(upstream: NativeUpstream) -> None:
    """The harness itself: the upstream Nimbus runs a batch on its key like any OpenAI Batch API."""
    lines = [kit.chat_line(f"self-{i}", f"upstream self check {i}", model="up-model") for i in range(2)]
    created = start_batch(upstream.sdk, lines, metadata={"nimbus_batch": "harness", "nimbus_part": "0"})
    batch = upstream.wait(created.id)
    assert batch.status == "completed", batch
    assert batch.request_counts.model_dump() == {"total": 2, "completed": 2, "failed": 0}
    output, errors = upstream.results(batch)
    assert errors == [] and sorted(custom_ids(output)) == ["self-0", "self-1"], (output, errors)
    assert upstream.parts_of("harness")[0].id == batch.id

    # What `cheap-unknown` relies on: a model the upstream lacks fails its batch's validation.
    unknown = [kit.chat_line("self-unknown", "no such model", model=UNKNOWN_UPSTREAM_MODEL)]
    failed = upstream.wait(start_batch(upstream.sdk, unknown).id)
    assert failed.status == "failed", failed
    assert failed.errors is not None and UNKNOWN_UPSTREAM_MODEL in failed.errors.data[0].message, failed.errors


def test_a_mixed_batch_runs_native_lines_upstream_and_the_rest_on_workers(
    upstream: NativeUpstream, sdk: openai.OpenAI
) -> None:
    tag = tzk.tag()
    native = [kit.chat_line(f"user-native-{i}", f"{tag} native {i}", model="cheap") for i in range(4)]
    local = [kit.chat_line(f"user-local-{i}", f"{tag} local {i}", model="local") for i in range(2)]
    lines = [native[0], local[0], native[1], native[2], local[1], native[3]]
    created = start_batch(sdk, lines, metadata={"case": "mixed"})

    batch = kit.wait_for_batch(sdk, created.id, timeout=DONE_WITHIN_S)
    assert batch.status == "completed", batch
    assert batch.errors is None, batch
    assert batch.metadata == {"case": "mixed"}
    assert batch.request_counts.model_dump() == {"total": 6, "completed": 6, "failed": 0}
    check_completed_timestamps(batch)
    assert batch.error_file_id is None, batch
    check_result_file(sdk, batch, batch.output_file_id, "output")

    # Upstream: one batch with exactly the native lines, rewritten for the upstream's model.
    (part,) = upstream.parts_of(batch.id)
    assert part.status == "completed", part
    assert upstream.uploads_of(batch.id) == [f"nimbus-{batch.id}-0000.jsonl"]
    sent = check_upstream_part(upstream, part, batch, 0, "up-model")
    assert upstream_line_texts(sent) == upstream_line_texts(native)
    assert not set(custom_ids(sent)) & set(custom_ids(lines)), "the upstream got the user's custom_ids"
    assert len(set(custom_ids(sent))) == len(sent), sent

    # Downstream: every line once, with what a worker-run batch gives.
    output, errors = kit.batch_results(sdk, batch)
    assert errors == []
    check_each_custom_id_once(custom_ids(lines), output, errors)
    check_line_ids(output)
    texts = {line["custom_id"]: text_of_line(line) for line in lines}
    bodies = []
    for line in output:
        body = check_output_line(line)
        bodies.append(body)
        custom_id = line["custom_id"]
        if custom_id.startswith("user-native"):
            assert body["model"] == "cheap", line
            expected = upstream.direct_answer("up-model", texts[custom_id])
        else:
            assert body["model"] == "local", line
            expected = sdk.chat.completions.create(model="local", messages=kit.user(texts[custom_id]))
        assert body["choices"][0]["message"]["content"] == expected.choices[0].message.content, line
        assert body["usage"]["prompt_tokens"] == expected.usage.prompt_tokens, line
        assert body["usage"]["completion_tokens"] == expected.usage.completion_tokens, line
    check_usage_matches_lines(batch, bodies, chat=True)


def test_an_embeddings_batch_goes_native_too(upstream: NativeUpstream, sdk: openai.OpenAI) -> None:
    texts = {"emb-a": "first text", "emb-b": ["two", "inputs"]}
    lines = [kit.embedding_line(cid, text, model="cheap-embedding") for cid, text in texts.items()]
    batch = kit.wait_for_batch(sdk, start_batch(sdk, lines, endpoint=EMBEDDINGS).id, timeout=DONE_WITHIN_S)
    assert batch.status == "completed", batch
    assert batch.request_counts.model_dump() == {"total": 2, "completed": 2, "failed": 0}
    (part,) = upstream.parts_of(batch.id)
    check_upstream_part(upstream, part, batch, 0, "up-embedding")
    output, errors = kit.batch_results(sdk, batch)
    check_each_custom_id_once(list(texts), output, errors)
    bodies = []
    for line in output:
        body = check_output_line(line, body_object="list")
        bodies.append(body)
        assert body["model"] == "cheap-embedding", body
        direct = upstream.sdk.embeddings.create(model="up-embedding", input=texts[line["custom_id"]], encoding_format="float")
        assert [item["embedding"] for item in body["data"]] == [item.embedding for item in direct.data], line
    check_usage_matches_lines(batch, bodies, chat=False)


def test_a_large_native_group_is_split_into_several_upstream_batches(
    upstream: NativeUpstream, split_sdk: openai.OpenAI
) -> None:
    count = 2 * SPLIT_MAX_LINES + 1
    lines = [kit.chat_line(f"split-{i}", f"split line {i}", model="cheap") for i in range(count)]
    lines.append(kit.chat_line("split-local", "runs on a worker", model="local"))
    batch = kit.wait_for_batch(split_sdk, start_batch(split_sdk, lines).id, timeout=DONE_WITHIN_S)
    assert batch.status == "completed", batch
    assert batch.request_counts.model_dump() == {"total": count + 1, "completed": count + 1, "failed": 0}

    parts = upstream.parts_of(batch.id)
    assert len(parts) == 3, parts
    sent: list[dict[str, Any]] = []
    for index, part in enumerate(parts):
        assert part.status == "completed", part
        part_lines = check_upstream_part(upstream, part, batch, index, "up-model")
        assert len(part_lines) <= SPLIT_MAX_LINES, part_lines
        sent += part_lines
    assert upstream.uploads_of(batch.id) == [f"nimbus-{batch.id}-{i:04d}.jsonl" for i in range(3)]
    assert upstream_line_texts(sent) == upstream_line_texts(lines[:count])
    assert len(set(custom_ids(sent))) == count, "custom_ids repeat across the parts"

    output, errors = kit.batch_results(split_sdk, batch)
    assert errors == []
    check_each_custom_id_once(custom_ids(lines), output, errors)
    check_line_ids(output)
    texts = {line["custom_id"]: text_of_line(line) for line in lines}
    for line in output:
        body = check_output_line(line)
        if line["custom_id"] != "split-local":
            assert body["model"] == "cheap", line
            expected = upstream.direct_answer("up-model", texts[line["custom_id"]])
            assert body["choices"][0]["message"]["content"] == expected.choices[0].message.content, line
    check_usage_matches_lines(batch, [line["response"]["body"] for line in output], chat=True)


def test_request_counts_move_while_the_upstream_batch_runs(upstream: NativeUpstream, sdk: openai.OpenAI) -> None:
    lines = [kit.chat_line(f"progress-{i}", f"slow line {i}", model="cheap-slow") for i in range(6)]
    created = start_batch(sdk, lines)
    seen: list[tuple[str, int]] = []

    def record(batch: Any) -> bool:
        counts = batch.request_counts
        seen.append((batch.status, counts.completed if counts else 0))
        return batch.status in kit.BATCH_TERMINAL_STATUSES

    batch = kit.wait_for_batch(sdk, created.id, until=record, timeout=DONE_WITHIN_S)
    assert batch.status == "completed", batch
    assert batch.request_counts.model_dump() == {"total": 6, "completed": 6, "failed": 0}
    midway = [(status, done) for status, done in seen if 0 < done < 6]
    assert midway, f"request_counts never showed partial progress: {seen}"
    assert all(status == "in_progress" for status, _ in midway), seen
    completed = [done for _, done in seen]
    assert completed == sorted(completed), f"request_counts went backwards: {seen}"
    (part,) = upstream.parts_of(batch.id)
    assert part.status == "completed", part


def test_lines_the_upstream_failed_go_to_the_error_file_with_its_error(
    upstream: NativeUpstream, sdk: openai.OpenAI
) -> None:
    lines = [
        kit.chat_line("fine-1", "works", model="cheap"),
        kit.chat_line("broken-1", "fails upstream", model="cheap-failing"),
        kit.chat_line("broken-2", "fails upstream too", model="cheap-failing"),
        kit.chat_line("fine-2", "works too", model="local"),
    ]
    batch = kit.wait_for_batch(sdk, start_batch(sdk, lines).id, timeout=DONE_WITHIN_S)
    assert batch.status == "completed", batch
    assert batch.request_counts.model_dump() == {"total": 4, "completed": 2, "failed": 2}
    check_result_file(sdk, batch, batch.error_file_id, "error")
    output, errors = kit.batch_results(sdk, batch)
    check_each_custom_id_once(custom_ids(lines), output, errors)
    check_line_ids(output + errors)
    assert sorted(custom_ids(output)) == ["fine-1", "fine-2"]
    assert sorted(custom_ids(errors)) == ["broken-1", "broken-2"]
    for line in errors:
        check_provider_error_line(line)
        assert line["response"]["status_code"] == 500, line

    # The upstream's own error lines, bodies and all, are what the downstream reports.
    parts = upstream.parts_of(batch.id)
    failing = [p for i, p in enumerate(parts) if upstream.sent(batch.id, i)[1][0]["body"]["model"] == "up-failing"]
    assert len(failing) == 1, parts
    upstream_output, upstream_errors = upstream.received(failing[0])
    assert upstream_output == [] and len(upstream_errors) == 2, upstream_errors
    assert Counter(status_and_body(line) for line in errors) == Counter(status_and_body(line) for line in upstream_errors)
    check_usage_matches_lines(batch, [line["response"]["body"] for line in output], chat=True)


def status_and_body(line: dict[str, Any]) -> tuple[int, str]:
    return line["response"]["status_code"], json.dumps(line["response"]["body"], sort_keys=True)


def run_beside_a_local_line(sdk: openai.OpenAI, native: list[dict[str, Any]]) -> tuple[Any, list[dict[str, Any]]]:
    """Run `native` lines, all bound to fail, next to one `local` line; the finished batch (checked:
    completed, exact counts, the local line's result kept) and its error lines (one per native line)."""
    lines = [*native, kit.chat_line("beside-local", "runs on a worker", model="local")]
    batch = kit.wait_for_batch(sdk, start_batch(sdk, lines).id, timeout=DONE_WITHIN_S)
    assert batch.status == "completed", batch
    assert batch.request_counts.model_dump() == {"total": len(lines), "completed": 1, "failed": len(native)}
    output, errors = kit.batch_results(sdk, batch)
    check_each_custom_id_once(custom_ids(lines), output, errors)
    check_line_ids(output + errors)
    assert custom_ids(output) == ["beside-local"], output
    check_output_line(output[0])
    assert sorted(custom_ids(errors)) == sorted(custom_ids(native)), errors
    return batch, errors


def test_an_upstream_batch_that_fails_validation_fails_its_lines(upstream: NativeUpstream, sdk: openai.OpenAI) -> None:
    native = [
        kit.chat_line("unknown-1", "model the upstream lacks", model="cheap-unknown"),
        kit.chat_line("unknown-2", "model the upstream lacks again", model="cheap-unknown"),
    ]
    batch, errors = run_beside_a_local_line(sdk, native)
    (part,) = upstream.parts_of(batch.id)
    assert part.status == "failed", part
    assert part.errors is not None and part.errors.data, part
    upstream_message = part.errors.data[0].message
    assert UNKNOWN_UPSTREAM_MODEL in upstream_message, part.errors
    for line in errors:
        check_unrun_line(line, "provider_batch_failed")
        assert upstream_message in line["error"]["message"], line


def test_a_rejected_upload_fails_its_lines(fake_provider: FakeBatchUpstream, sdk: openai.OpenAI) -> None:
    native = [
        kit.chat_line("rejected-1", "never uploaded", model="rejecting"),
        kit.chat_line("rejected-2", "never uploaded either", model="rejecting"),
    ]
    batch, errors = run_beside_a_local_line(sdk, native)
    uploads = [r for r in fake_provider.seen("POST", "/files", script="reject") if batch.id in (r.upload_filename or "")]
    assert uploads, "the provider never saw the upload"
    assert uploads[0].upload_filename == f"nimbus-{batch.id}-0000.jsonl", uploads[0]
    assert uploads[0].form.get("purpose") == "batch", uploads[0]
    assert not fake_provider.seen("POST", "/batches", script="reject"), "a batch was created from a rejected file"
    for line in errors:
        check_unrun_line(line, "provider_file_rejected")
        assert REJECT_MESSAGE in line["error"]["message"], line


def test_a_vanished_upstream_batch_fails_its_lines_and_is_polled_without_client_gets(
    fake_provider: FakeBatchUpstream, sdk: openai.OpenAI
) -> None:
    lines = [kit.chat_line(f"lost-{i}", f"lost line {i}", model="vanishing") for i in range(2)]
    created = start_batch(sdk, lines)

    # No GET on the downstream batch until the provider has been asked for its batch: polling is
    # the scheduler's job.
    def created_upstream() -> list[Any]:
        return [
            r
            for r in fake_provider.seen("POST", "/batches", script="vanish")
            if (r.json_body or {}).get("metadata", {}).get("nimbus_batch") == created.id
        ]

    kit.wait_until(lambda: bool(created_upstream()), timeout=15, interval=0.2, what="the batch created at the provider")
    (creation,) = created_upstream()
    assert creation.json_body["endpoint"] == CHAT, creation.json_body
    assert creation.json_body["metadata"]["nimbus_part"] == "0", creation.json_body
    polls = lambda: fake_provider.seen("GET", "/batches/batch-fake-", script="vanish")  # noqa: E731
    kit.wait_until(lambda: bool(polls()), timeout=10, interval=0.2, what="a poll of the provider batch")

    batch = kit.wait_for_batch(sdk, created.id, timeout=DONE_WITHIN_S)
    assert batch.status == "completed", batch
    assert batch.request_counts.model_dump() == {"total": 2, "completed": 0, "failed": 2}
    assert batch.output_file_id is None, batch
    output, errors = kit.batch_results(sdk, batch)
    check_each_custom_id_once(custom_ids(lines), output, errors)
    for line in errors:
        check_unrun_line(line, "provider_batch_not_found")


def test_cancel_cancels_the_upstream_batch_and_keeps_what_it_finished(
    upstream: NativeUpstream, sdk: openai.OpenAI
) -> None:
    lines = [kit.chat_line(f"cancel-{i}", f"slow line to cancel {i}", model="cheap-slow") for i in range(10)]
    created = start_batch(sdk, lines)
    (part,) = wait_for_parts(upstream, created.id, 1)
    # Cancel once the upstream has finished some lines (it runs them one at a time).
    upstream.wait(part.id, until=lambda b: b.request_counts is not None and b.request_counts.completed >= 2)

    cancelling = sdk.batches.cancel(created.id)
    assert cancelling.status == "cancelling", cancelling
    batch = kit.wait_for_batch(sdk, created.id, timeout=DONE_WITHIN_S)
    assert batch.status == "cancelled", batch
    assert batch.cancelled_at is not None and batch.completed_at is None, batch

    part = upstream.sdk.batches.retrieve(part.id)
    assert part.status == "cancelled", part
    finished_upstream = part.request_counts.completed
    assert 2 <= finished_upstream < len(lines), part

    output, _ = check_partial_results(sdk, batch, lines, "batch_cancelled")
    assert len(output) == finished_upstream, "lines the upstream finished were lost (or invented)"
    for line in output:
        assert line["response"]["body"]["model"] == "cheap-slow", line
    check_usage_matches_lines(batch, [line["response"]["body"] for line in output], chat=True)


def test_expiry_keeps_what_the_upstream_finished(upstream: NativeUpstream, sdk: openai.OpenAI) -> None:
    lines = [kit.chat_line(f"expire-{i}", f"slow line to expire {i}", model="cheap-slow") for i in range(12)]
    created = start_batch(sdk, lines, window="4s")
    (part,) = wait_for_parts(upstream, created.id, 1)

    batch = kit.wait_for_batch(sdk, created.id, timeout=DONE_WITHIN_S)
    assert batch.status == "expired", batch
    assert batch.expired_at is not None and batch.expired_at >= batch.expires_at, batch

    part = upstream.wait(part.id, timeout=10)
    assert part.status in {"cancelled", "expired"}, f"the upstream batch still runs or completed: {part!r}"
    output, _ = check_partial_results(sdk, batch, lines, "batch_expired")
    assert output, "lines the upstream finished before the expiry should be kept"
    assert len(output) == part.request_counts.completed, (len(output), part.request_counts)
    check_usage_matches_lines(batch, [line["response"]["body"] for line in output], chat=True)


def test_batch_inference_on_a_native_variant(upstream: NativeUpstream, downstream: kit.NimbusServer) -> None:
    tag = tzk.tag()
    texts = [f"{tag} first", f"{tag} second"]
    gateway = Gateway(downstream, "unused-local-key")
    try:
        created = gateway.submit({"function_name": "native_chat", "inputs": [tzk.says(text) for text in texts]})
        polled = gateway.finished(created["batch_id"])
        assert polled["status"] == "completed", polled
        inferences = {item["inference_id"]: item for item in polled["inferences"]}
        assert set(inferences) == set(created["inference_ids"]), polled
        for index, text in enumerate(texts):
            item = inferences[created["inference_ids"][index]]
            expected = upstream.direct_answer("up-model", text)
            assert item["variant_name"] == "cheap", item
            assert item["content"] == [{"type": "text", "text": expected.choices[0].message.content}], item
            assert item["usage"] == {
                "input_tokens": expected.usage.prompt_tokens,
                "output_tokens": expected.usage.completion_tokens,
            }, item
            record = gateway.record(item["inference_id"])
            assert record["inference_id"] == item["inference_id"], record
            assert uuid.UUID(record["inference_id"]).version == 7
        sent = [
            line
            for _, name, content, _ in upstream.relay.uploads()
            for line in map(json.loads, content.decode().splitlines())
            if name.startswith("nimbus-") and tag in json.dumps(line)
        ]
        assert len(sent) == 2 and all(line["body"]["model"] == "up-model" for line in sent), sent
    finally:
        gateway.close()


def files_containing(root: Path, needle: bytes) -> list[str]:
    """Every file under `root` whose bytes contain `needle`."""
    return [str(path) for path in root.rglob("*") if path.is_file() and needle in path.read_bytes()]


def test_dynamic_credentials_are_sealed_while_the_upstream_batch_runs(
    upstream: NativeUpstream, downstream: kit.NimbusServer, sdk: openai.OpenAI
) -> None:
    """A native model whose upstream key comes with each line: the lines run on the upstream's key
    they carry, lines with a key the upstream refuses are rejected there, and no key is ever
    written to the downstream's storage in the clear (only the input file holds them, as sent)."""
    good = {"credentials": {DYNAMIC_CREDENTIAL: upstream.key}}
    bad_key = f"sk-not-a-key-{uuid.uuid4().hex}"
    bad = {"credentials": {DYNAMIC_CREDENTIAL: bad_key}}
    lines = [
        kit.chat_line("dyn-1", "runs on the key it carries", model="cheap-dynamic", **good),
        kit.chat_line("dyn-2", "so does this one", model="cheap-dynamic", **good),
        kit.chat_line("dyn-bad", "carries a key the upstream refuses", model="cheap-dynamic", **bad),
    ]
    batch = kit.wait_for_batch(sdk, start_batch(sdk, lines).id, timeout=DONE_WITHIN_S)
    assert batch.status == "completed", batch
    assert batch.request_counts.model_dump() == {"total": 3, "completed": 2, "failed": 1}
    output, errors = kit.batch_results(sdk, batch)
    check_each_custom_id_once(custom_ids(lines), output, errors)
    assert sorted(custom_ids(output)) == ["dyn-1", "dyn-2"], output
    for line in output:
        assert check_output_line(line)["model"] == "cheap-dynamic", line
    (refused,) = errors
    check_unrun_line(refused, "provider_file_rejected")
    # The two keys made two groups: one upstream batch, and one upload the upstream refused.
    (part,) = upstream.parts_of(batch.id)
    assert part.status == "completed", part
    assert all("credentials" not in line["body"] for line in upstream.sent(batch.id, part_index(part))[1])

    # At rest: the input file holds the keys as the user sent them; nothing else does.
    input_bytes = sdk.files.content(batch.input_file_id).content
    for key in (upstream.key, bad_key):
        assert key.encode() in input_bytes
        holders = [
            path
            for path in files_containing(downstream.data_dir, key.encode())
            if not path.endswith(batch.input_file_id) and "sealing.key" not in path
        ]
        assert holders == [], f"a key stored in the clear: {holders}"
    sealing_key = downstream.data_dir / "sealing.key"
    assert sealing_key.stat().st_mode & 0o777 == 0o600


def part_index(part: Any) -> int:
    return int(part.metadata["nimbus_part"])


def test_batch_inference_credentials_are_sealed_too(upstream: NativeUpstream, downstream: kit.NimbusServer) -> None:
    """`/batch_inference` keeps the batch's `credentials` until it ends: sealed, never in the clear."""
    tag = tzk.tag()
    # Input files of earlier tests hold the key as their users sent it.
    held_before = set(files_containing(downstream.data_dir, upstream.key.encode()))
    gateway = Gateway(downstream, "unused-local-key")
    try:
        created = gateway.submit(
            {
                "function_name": "native_dynamic_chat",
                "inputs": [tzk.says(f"{tag} sealed")],
                "credentials": {DYNAMIC_CREDENTIAL: upstream.key},
            }
        )
        polled = gateway.finished(created["batch_id"])
        assert polled["status"] == "completed", polled
        (item,) = polled["inferences"]
        expected = upstream.direct_answer("up-model", f"{tag} sealed")
        assert item["content"] == [{"type": "text", "text": expected.choices[0].message.content}], item
    finally:
        gateway.close()
    holders = set(files_containing(downstream.data_dir, upstream.key.encode())) - held_before
    assert holders == set(), f"a key stored in the clear: {holders}"
