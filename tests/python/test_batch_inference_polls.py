"""Polling `/batch_inference` batches on the local server, with plain HTTP: exactly `pending` while
a batch runs (the recording upstream holds its answers back), then `completed` with each
`/inference` reply, the same on every poll and after a restart; failed items left out (and listed
with `include_failures`), a batch where all failed is `failed`; paging with `limit`/`after`;
other projects, unknown ids and `/v1/batches` do not see the batch.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import nimbus_testkit as kit
import tensorzero_kit as tzk
from batch_inference_kit import DONE_WITHIN_S, Gateway, chat_reply, error_of, relay_batch
from batch_inference_kit import alpha, beta, config, projects, upstream  # noqa: F401 - fixtures
from mock_upstream import FAIL_MARKER, RecordingUpstream


# --------------------------------------------------------------------------------------------
# Polling
# --------------------------------------------------------------------------------------------


def test_polls_are_pending_while_the_batch_runs_then_complete_and_stay_the_same(
    alpha: Gateway, upstream: RecordingUpstream
) -> None:
    marker = tzk.tag()
    with upstream.hold(marker):
        created = alpha.submit(relay_batch([f"{marker} one", f"{marker} two"]))
        batch_id, ids = created["batch_id"], created["inference_ids"]
        kit.wait_until(lambda: len(upstream.with_text(marker)) >= 1, timeout=DONE_WITHIN_S, what="a model call in flight")
        assert alpha.poll(batch_id) == {"status": "pending"}
        assert alpha.poll(batch_id, include_failures=True, limit=1) == {"status": "pending"}
        for inference_id in ids:
            assert alpha.poll_one(batch_id, inference_id) == {"status": "pending"}
        unknown = alpha.get(f"/batch_inference/{batch_id}/inference/{uuid.uuid4()}")
        assert unknown.status_code == 404, unknown.text
        record = alpha.http.get(f"/inferences/{ids[0]}")
        assert record.status_code == 404, record.text
    polled = alpha.finished(batch_id)
    assert polled == {
        "status": "completed",
        "batch_id": batch_id,
        "inferences": [chat_reply(created, 0, "upstream"), chat_reply(created, 1, "upstream")],
    }
    for index, inference_id in enumerate(ids):
        one = alpha.poll_one(batch_id, inference_id)
        assert one == {"status": "completed", "batch_id": batch_id, "inferences": [polled["inferences"][index]]}
        assert alpha.poll_one(batch_id, inference_id) == one
    for _ in range(3):
        assert alpha.poll(batch_id) == polled


def test_a_finished_batch_is_rebuilt_from_its_records_after_a_restart(
    config: Path, server_factory: Callable[..., kit.NimbusServer], tmp_path_factory: pytest.TempPathFactory
) -> None:
    data_dir = tmp_path_factory.mktemp("data-batch-inference-restart")
    keys: dict[str, str] = {}

    def create(cli: kit.NimbusCli) -> None:
        keys["key"] = cli.create_key("restart", name="batch-inference-restart")["api_key"]

    first_server = server_factory("nimbus-bi-before", before_start=create, data_dir=data_dir, config=config)
    before = Gateway(first_server, keys["key"])
    try:
        created = before.submit(relay_batch(["kept one", f"{FAIL_MARKER} lost", "kept two"], tags=[{"n": "1"}, None, None]))
        polled = before.finished(created["batch_id"])
        with_failures = before.poll(created["batch_id"], include_failures=True)
        one = before.poll_one(created["batch_id"], created["inference_ids"][2])
        stored = before.record(created["inference_ids"][0])
    finally:
        first_server.stop()
        before.close()
    after = Gateway(server_factory("nimbus-bi-after", data_dir=data_dir, config=config), keys["key"])
    try:
        assert [reply["inference_id"] for reply in polled["inferences"]] == [created["inference_ids"][i] for i in (0, 2)]
        assert after.poll(created["batch_id"]) == polled
        assert after.poll(created["batch_id"], include_failures=True) == with_failures
        assert after.poll_one(created["batch_id"], created["inference_ids"][2]) == one
        assert after.poll_one(created["batch_id"], created["inference_ids"][1]) == {"status": "failed"}
        assert after.record(created["inference_ids"][0]) == stored
    finally:
        after.close()


def test_items_whose_model_call_failed_are_left_out_and_listed_on_request(
    alpha: Gateway, upstream: RecordingUpstream
) -> None:
    marker = tzk.tag()
    texts = [f"{marker} ok 0", f"{marker} {FAIL_MARKER} 1", f"{marker} ok 2", f"{marker} {FAIL_MARKER} 3"]
    created = alpha.submit(relay_batch(texts))
    batch_id, ids, episodes = created["batch_id"], created["inference_ids"], created["episode_ids"]
    polled = alpha.finished(batch_id)
    assert polled == {
        "status": "completed",
        "batch_id": batch_id,
        "inferences": [chat_reply(created, 0, "upstream"), chat_reply(created, 2, "upstream")],
    }
    listed = alpha.poll(batch_id, include_failures=True)
    assert set(listed) == {"status", "batch_id", "inferences", "failed_inferences"}, listed
    assert listed["inferences"] == polled["inferences"]
    failed = listed["failed_inferences"]
    assert [{k: v for k, v in f.items() if k != "error"} for f in failed] == [
        {"inference_id": ids[i], "episode_id": episodes[i]} for i in (1, 3)
    ]
    assert all(isinstance(f["error"], str) and f["error"] for f in failed), failed
    # Failed on its own: TensorZero's bare `failed`; with the extension, the reason.
    assert alpha.poll_one(batch_id, ids[1]) == {"status": "failed"}
    assert alpha.poll_one(batch_id, ids[1], include_failures=True) == {
        "status": "failed",
        "batch_id": batch_id,
        "inferences": [],
        "failed_inferences": [failed[0]],
    }
    assert alpha.poll_one(batch_id, ids[2], include_failures=True) == {
        "status": "completed",
        "batch_id": batch_id,
        "inferences": [polled["inferences"][1]],
        "failed_inferences": [],
    }
    assert alpha.http.get(f"/inferences/{ids[1]}").status_code == 404


def test_a_batch_where_every_call_failed_is_failed(alpha: Gateway) -> None:
    created = alpha.submit(relay_batch([f"{FAIL_MARKER} a", f"{FAIL_MARKER} b"]))
    batch_id = created["batch_id"]
    assert alpha.finished(batch_id) == {"status": "failed"}
    assert alpha.poll(batch_id) == {"status": "failed"}
    assert alpha.poll_one(batch_id, created["inference_ids"][0]) == {"status": "failed"}
    listed = alpha.poll(batch_id, include_failures=True)
    assert listed["status"] == "failed" and listed["batch_id"] == batch_id and listed["inferences"] == []
    assert [f["inference_id"] for f in listed["failed_inferences"]] == created["inference_ids"]


def test_the_variants_retries_apply_to_each_item(alpha: Gateway, upstream: RecordingUpstream) -> None:
    once, retried = tzk.tag(), tzk.tag()
    plain = alpha.submit(relay_batch([f"{FAIL_MARKER} {once}"]))
    retrying = alpha.submit(relay_batch([f"{FAIL_MARKER} {retried}"], function_name="retrying_relay"))
    assert alpha.finished(plain["batch_id"]) == {"status": "failed"}
    assert alpha.finished(retrying["batch_id"]) == {"status": "failed"}
    # However often the provider client itself retries a 500, the variant asks it twice.
    calls = len(upstream.with_text(once))
    assert calls >= 1
    assert len(upstream.with_text(retried)) == 2 * calls


def test_pages_concatenated_are_the_whole_list(alpha: Gateway) -> None:
    texts = [f"page item {i}" for i in range(7)]
    texts[3] = f"{FAIL_MARKER} page item 3"
    created = alpha.submit(relay_batch(texts))
    batch_id, ids = created["batch_id"], created["inference_ids"]
    whole = alpha.finished(batch_id)
    assert len(whole["inferences"]) == 6
    pages: list[dict[str, Any]] = []
    query: dict[str, Any] = {"limit": 2}
    while True:
        page = alpha.poll(batch_id, **query)
        pages.append(page)
        if not page["has_more"]:
            assert "next_after" not in page, page
            break
        query["after"] = page["next_after"]
    # Pages cover items (2 each), so the failed item's page holds one inference.
    assert [page["next_after"] for page in pages[:-1]] == [ids[1], ids[3], ids[5]]
    assert [len(page["inferences"]) for page in pages] == [2, 1, 2, 1]
    assert all(set(page) <= {"status", "batch_id", "inferences", "has_more", "next_after"} for page in pages)
    assert {page["status"] for page in pages} == {"completed"}
    assert [reply for page in pages for reply in page["inferences"]] == whole["inferences"]
    tail = alpha.poll(batch_id, after=ids[4], include_failures=True)
    assert tail["has_more"] is False and tail["failed_inferences"] == []
    assert tail["inferences"] == whole["inferences"][4:]
    assert alpha.poll(batch_id, after=ids[-1]) == {"status": "completed", "batch_id": batch_id, "inferences": [], "has_more": False}


@pytest.mark.parametrize(
    "query",
    [{"limit": "0"}, {"limit": "-1"}, {"limit": "many"}, {"after": "nope"}, {"include_failures": "yes"}, {"offset": "1"}],
)
def test_bad_poll_queries_are_400(alpha: Gateway, query: dict[str, str]) -> None:
    created = alpha.submit(relay_batch(["query"]))
    alpha.finished(created["batch_id"])
    error_of(alpha.get(f"/batch_inference/{created['batch_id']}", **query), 400)


def test_paging_a_single_inference_or_after_a_stranger_is_400(alpha: Gateway) -> None:
    created = alpha.submit(relay_batch(["paging one"]))
    batch_id, [inference_id] = created["batch_id"], created["inference_ids"]
    alpha.finished(batch_id)
    error_of(alpha.get(f"/batch_inference/{batch_id}/inference/{inference_id}", limit=1), 400)
    error_of(alpha.get(f"/batch_inference/{batch_id}", after=str(uuid.uuid4())), 400)


# --------------------------------------------------------------------------------------------
# Who sees what
# --------------------------------------------------------------------------------------------


def test_another_projects_batch_is_not_found(alpha: Gateway, beta: Gateway) -> None:
    created = alpha.submit(relay_batch(["private"]))
    batch_id, [inference_id] = created["batch_id"], created["inference_ids"]
    alpha.finished(batch_id)
    assert error_of(beta.get(f"/batch_inference/{batch_id}"), 404) == f"Batch not found: {batch_id}"
    assert error_of(beta.get(f"/batch_inference/{batch_id}/inference/{inference_id}"), 404) == f"Batch not found: {batch_id}"
    assert beta.http.get(f"/inferences/{inference_id}").status_code == 404


def test_unknown_batches_and_inferences_are_404(alpha: Gateway) -> None:
    missing = str(uuid.uuid4())
    assert error_of(alpha.get(f"/batch_inference/{missing}"), 404) == f"Batch not found: {missing}"
    created = alpha.submit(relay_batch(["known"]))
    alpha.finished(created["batch_id"])
    stranger = created["inference_ids"][0][:-4] + "ffff"
    message = error_of(alpha.get(f"/batch_inference/{created['batch_id']}/inference/{stranger}"), 404)
    assert stranger in message
    error_of(alpha.get("/batch_inference/not-a-uuid"), 400)
    error_of(alpha.get(f"/batch_inference/{created['batch_id']}/inference/not-a-uuid"), 400)


def test_batch_inference_batches_stay_out_of_v1_batches(alpha: Gateway) -> None:
    created = alpha.submit(relay_batch(["hidden"]))
    batch_id = created["batch_id"]
    alpha.finished(batch_id)
    with kit.make_client(alpha.server.api_base, api_key=alpha.http.headers["authorization"].removeprefix("Bearer ")) as sdk:
        listed = [batch.id for batch in sdk.batches.list(limit=100)]
        assert all(batch_id not in listed_id for listed_id in listed), listed
        file = kit.upload_batch_input(sdk, [kit.chat_line("one", "Hi")])
        openai_batch = sdk.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")
    for path in (f"/v1/batches/{batch_id}", f"/v1/batches/batch_{uuid.UUID(batch_id).hex}"):
        assert alpha.http.get(path).status_code == 404, path
    cancel = alpha.http.post(f"/v1/batches/batch_{uuid.UUID(batch_id).hex}/cancel")
    assert cancel.status_code == 404, cancel.text
    # An OpenAI batch's id is no /batch_inference batch id: as it is, it is not a UUID; as a UUID, not found.
    assert "UUID" in error_of(alpha.get(f"/batch_inference/{openai_batch.id}"), 400)
    as_uuid = str(uuid.UUID(hex=openai_batch.id.removeprefix("batch_")))
    assert error_of(alpha.get(f"/batch_inference/{as_uuid}"), 404) == f"Batch not found: {as_uuid}"
