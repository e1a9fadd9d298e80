"""`/v1/batches` on the local server with the real OpenAI SDK: create-time errors (400/404),
input-file validation failures with OpenAI's codes and 1-based line numbers, retrieve/cancel
errors, Idempotency-Key on batch and file creation, listing with cursors and an exact
`has_more`, and per-project isolation.

The end-to-end runs (results, cancel during a run, expiry) are in test_batches_lifecycle.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
import requests

import nimbus_testkit as kit

CHAT = "/v1/chat/completions"
MISSING_FILE = "file-00000000000070008000000000000000"
MISSING_BATCH = "batch_00000000000070008000000000000000"


server, sdk = kit.batch_server_fixtures("nimbus-batches-api")


@pytest.fixture(scope="module")
def input_file(sdk: openai.OpenAI) -> Any:
    """A valid one-line chat input file, shared by the tests that only need some valid input."""
    return kit.upload_batch_input(sdk, [kit.chat_line("only", "Hi")])


def create(sdk: openai.OpenAI, file_id: str, **kwargs: Any) -> Any:
    kwargs.setdefault("endpoint", CHAT)
    kwargs.setdefault("completion_window", "24h")
    return sdk.batches.create(input_file_id=file_id, **kwargs)


def api_error(raised: pytest.ExceptionInfo[openai.APIStatusError], status: int, *, param: str | None) -> dict[str, Any]:
    err = raised.value
    assert err.status_code == status, err
    error = kit.error_envelope(err.response)
    assert error["param"] == param, error
    return error


def all_batch_ids(sdk: openai.OpenAI) -> list[str]:
    return [batch.id for batch in sdk.batches.list(limit=100)]


# --------------------------------------------------------------------------------------------
# Create: 400 / 404
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["/v1/completions", "/v1/responses", "/v1/chat/completion", "v1/embeddings", ""])
def test_unsupported_endpoint_is_400(sdk: openai.OpenAI, input_file: Any, endpoint: str) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        create(sdk, input_file.id, endpoint=endpoint)
    error = api_error(raised, 400, param="endpoint")
    assert error["code"] == "invalid_value", error


@pytest.mark.parametrize("window", ["1h", "23h", "169h", "24", "1d", "24H", "", "5s"])
def test_bad_completion_window_is_400(nimbus_server: kit.NimbusServer, client: openai.OpenAI, window: str) -> None:
    # The session's open server does not allow short windows, so "5s" is rejected there too.
    file = kit.upload_batch_input(client, [kit.chat_line("w", "Hi")])
    with pytest.raises(openai.BadRequestError) as raised:
        create(client, file.id, completion_window=window)
    error = api_error(raised, 400, param="completion_window")
    assert error["code"] == "invalid_value", error


@pytest.mark.parametrize(("window", "seconds"), [("24h", 86_400), ("72h", 72 * 3600), ("168h", 168 * 3600), ("5s", 5)])
def test_accepted_completion_windows(sdk: openai.OpenAI, input_file: Any, window: str, seconds: int) -> None:
    batch = create(sdk, input_file.id, completion_window=window)
    assert batch.completion_window == window
    assert batch.expires_at == batch.created_at + seconds, batch


def test_metadata_at_the_limits_is_kept(sdk: openai.OpenAI, input_file: Any) -> None:
    metadata = {f"k{i:02d}".ljust(64, "x"): "v" * 512 for i in range(16)}
    batch = create(sdk, input_file.id, metadata=metadata)
    assert batch.metadata == metadata
    assert sdk.batches.retrieve(batch.id).metadata == metadata


@pytest.mark.parametrize(
    "metadata",
    [
        pytest.param({f"key{i}": "v" for i in range(17)}, id="17-keys"),
        pytest.param({"k" * 65: "v"}, id="key-65-chars"),
        pytest.param({"key": "v" * 513}, id="value-513-chars"),
        pytest.param({"key": 1}, id="number-value"),
        pytest.param({"key": {"nested": "x"}}, id="object-value"),
    ],
)
def test_bad_metadata_is_400(sdk: openai.OpenAI, input_file: Any, metadata: dict[str, Any]) -> None:
    before = all_batch_ids(sdk)
    with pytest.raises(openai.BadRequestError) as raised:
        create(sdk, input_file.id, metadata=metadata)
    api_error(raised, 400, param="metadata")
    assert all_batch_ids(sdk) == before, "a rejected create left a batch behind"


def test_missing_input_file_is_404(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        create(sdk, MISSING_FILE)
    error = api_error(raised, 404, param="input_file_id")
    assert error["message"] == f"No such File object: {MISSING_FILE}", error


@pytest.mark.parametrize("purpose", ["assistants", "user_data"])
def test_input_file_with_another_purpose_is_400(sdk: openai.OpenAI, purpose: str) -> None:
    content = kit.jsonl([kit.chat_line("p", "Hi")])
    file = sdk.files.create(file=("requests.txt", content), purpose=purpose)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError) as raised:
        create(sdk, file.id)
    api_error(raised, 400, param="input_file_id")


def test_batch_output_file_is_not_an_input(sdk: openai.OpenAI, input_file: Any) -> None:
    done = kit.wait_for_batch(sdk, create(sdk, input_file.id).id)
    assert done.status == "completed" and done.output_file_id, done
    with pytest.raises(openai.BadRequestError) as raised:
        create(sdk, done.output_file_id)
    api_error(raised, 400, param="input_file_id")


@pytest.mark.parametrize("missing", ["input_file_id", "endpoint", "completion_window"])
def test_missing_create_field_is_400(server: kit.NimbusServer, input_file: Any, missing: str) -> None:
    body = {"input_file_id": input_file.id, "endpoint": CHAT, "completion_window": "24h"}
    del body[missing]
    response = requests.post(f"{server.api_base}/batches", json=body, timeout=30)
    assert response.status_code == 400, response.text
    kit.error_envelope(response)


# --------------------------------------------------------------------------------------------
# Input validation: the batch fails with every problem listed
# --------------------------------------------------------------------------------------------


def line_without(field: str, custom_id: str) -> dict[str, Any]:
    line = kit.chat_line(custom_id, "Hi")
    del line[field]
    return line


INVALID_LINES: list[tuple[dict[str, Any] | str, tuple[str, str | None] | None]] = [
    # (line, expected (code, param) or None for a valid line)
    ('{"custom_id": "broken", "method": "POST", ', ("invalid_json_line", None)),
    (line_without("custom_id", "unused"), ("missing_required_parameter", "custom_id")),
    ({**kit.chat_line("wrong-url", "Hi"), "url": "/v1/embeddings"}, ("invalid_url", "url")),
    (kit.chat_line("streams", "Hi", stream=True), ("streaming_unsupported", "body.stream")),
    (kit.chat_line("no-model", "Hi", model="no-such-model"), ("model_not_found", "body.model")),
    (kit.chat_line("shorthand", "Hi", model="dummy::echo"), None),
    (kit.chat_line("bad-shorthand", "Hi", model="nowhere::echo"), ("model_not_found", "body.model")),
    (kit.chat_line("dup", "first"), None),
    (kit.chat_line("dup", "second"), ("duplicate_custom_id", "custom_id")),
    (line_without("method", "no-method"), ("missing_required_parameter", "method")),
    (line_without("url", "no-url"), ("missing_required_parameter", "url")),
    (line_without("body", "no-body"), ("missing_required_parameter", "body")),
    (kit.chat_line("fine", "Hi"), None),
    (
        {"custom_id": "no-messages", "method": "POST", "url": CHAT, "body": {"model": "dummy"}},
        ("invalid_request", "body.messages"),
    ),
]


def check_failed(batch: Any) -> None:
    assert batch.status == "failed", batch
    assert batch.failed_at is not None and batch.created_at <= batch.failed_at, batch
    assert batch.in_progress_at is None and batch.completed_at is None, batch
    assert batch.output_file_id is None and batch.error_file_id is None, batch
    assert batch.errors is not None and batch.errors.object == "list", batch
    assert batch.errors.data, batch


def test_invalid_lines_fail_the_batch(sdk: openai.OpenAI) -> None:
    file = kit.upload_batch_input(sdk, [line for line, _ in INVALID_LINES])
    batch = kit.wait_for_batch(sdk, create(sdk, file.id).id)
    check_failed(batch)
    expected = [
        (code, param, number)
        for number, (_, problem) in enumerate(INVALID_LINES, start=1)
        if problem is not None
        for code, param in [problem]
    ]
    found = sorted(((e.code, e.param, e.line) for e in batch.errors.data), key=lambda e: (e[2] or 0, e[0]))
    assert found == expected
    for error in batch.errors.data:
        assert isinstance(error.message, str) and error.message, error
    invalid_json = next(e for e in batch.errors.data if e.code == "invalid_json_line")
    assert invalid_json.message == "This line is not parseable as valid JSON."


def test_one_bad_line_among_good_ones(sdk: openai.OpenAI) -> None:
    lines = [kit.chat_line(f"ok-{i}", "Hi") for i in range(4)]
    lines.insert(2, kit.chat_line("bad", "Hi", model="gpt-nonexistent"))
    batch = kit.wait_for_batch(sdk, create(sdk, kit.upload_batch_input(sdk, lines).id).id)
    check_failed(batch)
    assert [(e.code, e.param, e.line) for e in batch.errors.data] == [("model_not_found", "body.model", 3)]


def test_embedding_line_in_a_chat_batch_is_invalid_url(sdk: openai.OpenAI) -> None:
    lines = [kit.chat_line("chat", "Hi"), kit.embedding_line("emb", "text")]
    batch = kit.wait_for_batch(sdk, create(sdk, kit.upload_batch_input(sdk, lines).id).id)
    check_failed(batch)
    assert [(e.code, e.param, e.line) for e in batch.errors.data] == [("invalid_url", "url", 2)]


@pytest.mark.parametrize("content", [b"", b"\n\n"], ids=["zero-bytes", "blank-lines"])
def test_empty_file_fails(sdk: openai.OpenAI, content: bytes) -> None:
    batch = kit.wait_for_batch(sdk, create(sdk, kit.upload_batch_input(sdk, content).id).id)
    check_failed(batch)
    assert [(e.code, e.line) for e in batch.errors.data] == [("empty_file", None)]
    # A failed batch cannot be cancelled.
    with pytest.raises(openai.ConflictError) as raised:
        sdk.batches.cancel(batch.id)
    assert kit.error_envelope(raised.value.response)["message"] == "Cannot cancel a batch with status 'failed'."


# --------------------------------------------------------------------------------------------
# Retrieve and cancel
# --------------------------------------------------------------------------------------------


def test_retrieve_unknown_is_404(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        sdk.batches.retrieve(MISSING_BATCH)
    error = kit.error_envelope(raised.value.response)
    assert error["message"] == f"No such Batch object: {MISSING_BATCH}", error


def test_cancel_unknown_is_404(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        sdk.batches.cancel(MISSING_BATCH)
    assert kit.error_envelope(raised.value.response)["message"] == f"No such Batch object: {MISSING_BATCH}"


def test_retrieve_returns_what_create_returned(sdk: openai.OpenAI, input_file: Any) -> None:
    created = create(sdk, input_file.id, metadata={"a": "b"})
    fetched = sdk.batches.retrieve(created.id)
    assert fetched.id == created.id
    for field in ("object", "endpoint", "input_file_id", "completion_window", "created_at", "expires_at", "metadata"):
        assert getattr(fetched, field) == getattr(created, field), field


def test_cancel_completed_batch_is_409(sdk: openai.OpenAI, input_file: Any) -> None:
    done = kit.wait_for_batch(sdk, create(sdk, input_file.id).id)
    assert done.status == "completed", done
    with pytest.raises(openai.ConflictError) as raised:
        sdk.batches.cancel(done.id)
    assert raised.value.status_code == 409
    error = kit.error_envelope(raised.value.response)
    assert error["message"] == "Cannot cancel a batch with status 'completed'.", error
    after = sdk.batches.retrieve(done.id)
    assert after.status == "completed" and after.cancelling_at is None and after.cancelled_at is None


# --------------------------------------------------------------------------------------------
# Idempotency-Key
# --------------------------------------------------------------------------------------------


def test_batch_create_with_idempotency_key(sdk: openai.OpenAI, input_file: Any) -> None:
    key = f"batch-{uuid.uuid4()}"
    first = create(sdk, input_file.id, extra_headers={"Idempotency-Key": key})
    second = create(sdk, input_file.id, extra_headers={"Idempotency-Key": key})
    assert second.id == first.id
    assert second.created_at == first.created_at
    ids = all_batch_ids(sdk)
    assert ids.count(first.id) == 1, ids
    other = create(sdk, input_file.id, extra_headers={"Idempotency-Key": f"other-{uuid.uuid4()}"})
    assert other.id != first.id
    plain = create(sdk, input_file.id)
    assert plain.id not in {first.id, other.id}


def test_file_create_with_idempotency_key(sdk: openai.OpenAI) -> None:
    key = f"file-{uuid.uuid4()}"
    content = kit.jsonl([kit.chat_line("idem", "Hi")])
    first = sdk.files.create(file=("idem.jsonl", content), purpose="batch", extra_headers={"Idempotency-Key": key})
    second = sdk.files.create(file=("idem.jsonl", content), purpose="batch", extra_headers={"Idempotency-Key": key})
    assert second.id == first.id
    assert second.created_at == first.created_at
    ids = [f.id for f in sdk.files.list()]
    assert ids.count(first.id) == 1, ids
    other = sdk.files.create(
        file=("idem.jsonl", content), purpose="batch", extra_headers={"Idempotency-Key": f"other-{uuid.uuid4()}"}
    )
    assert other.id != first.id


# --------------------------------------------------------------------------------------------
# List
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def list_server(server_factory: Callable[..., kit.NimbusServer]) -> kit.NimbusServer:
    """A server of its own, so the listing tests know exactly which batches exist."""
    return server_factory("nimbus-batches-list", extra_env=kit.BATCH_SERVER_ENV)


@pytest.fixture(scope="module")
def listed(list_server: kit.NimbusServer) -> Iterator[tuple[openai.OpenAI, list[str]]]:
    """Five batches created one after the other (within about a second: ordering must not rest on
    `created_at` alone); their ids newest first."""
    with kit.make_client(list_server.api_base) as sdk:
        file = kit.upload_batch_input(sdk, [kit.chat_line("l", "Hi")])
        created = [create(sdk, file.id, metadata={"n": str(i)}).id for i in range(5)]
        yield sdk, created[::-1]


def test_empty_list(server_factory: Callable[..., kit.NimbusServer]) -> None:
    server = server_factory("nimbus-batches-empty")
    response = requests.get(f"{server.api_base}/batches", timeout=30)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "list" and body["data"] == [] and body["has_more"] is False, body
    with kit.make_client(server.api_base) as sdk:
        assert list(sdk.batches.list()) == []


def test_auto_paging_visits_each_batch_once_newest_first(listed: tuple[openai.OpenAI, list[str]]) -> None:
    sdk, newest_first = listed
    assert [batch.id for batch in sdk.batches.list(limit=2)] == newest_first
    assert [batch.id for batch in sdk.batches.list()] == newest_first


def test_pages_and_exact_has_more(list_server: kit.NimbusServer, listed: tuple[openai.OpenAI, list[str]]) -> None:
    _, newest_first = listed

    def page(**params: Any) -> dict[str, Any]:
        response = requests.get(f"{list_server.api_base}/batches", params=params, timeout=30)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["object"] == "list", body
        ids = [batch["id"] for batch in body["data"]]
        assert all(batch["object"] == "batch" for batch in body["data"])
        if ids:
            assert body["first_id"] == ids[0] and body["last_id"] == ids[-1], body
        return {"ids": ids, "has_more": body["has_more"]}

    assert page(limit=2) == {"ids": newest_first[:2], "has_more": True}
    assert page(limit=2, after=newest_first[1]) == {"ids": newest_first[2:4], "has_more": True}
    assert page(limit=2, after=newest_first[3]) == {"ids": newest_first[4:], "has_more": False}
    assert page(limit=4) == {"ids": newest_first[:4], "has_more": True}
    assert page(limit=5) == {"ids": newest_first, "has_more": False}
    assert page(limit=100) == {"ids": newest_first, "has_more": False}
    assert page() == {"ids": newest_first, "has_more": False}
    assert page(limit=1, after=newest_first[-1]) == {"ids": [], "has_more": False}


@pytest.mark.parametrize("limit", [0, 101, -1])
def test_limit_out_of_range_is_400(sdk: openai.OpenAI, limit: int) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        sdk.batches.list(limit=limit)
    api_error(raised, 400, param="limit")


# --------------------------------------------------------------------------------------------
# Projects
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_projects(server_factory: Callable[..., kit.NimbusServer]) -> tuple[kit.NimbusServer, str, str]:
    keys: dict[str, str] = {}

    def create_keys(cli: kit.NimbusCli) -> None:
        keys["alpha"] = cli.create_key("alpha", name="batches-alpha")["api_key"]
        keys["beta"] = cli.create_key("beta", name="batches-beta")["api_key"]

    server = server_factory("nimbus-batches-projects", before_start=create_keys, extra_env=kit.BATCH_SERVER_ENV)
    return server, keys["alpha"], keys["beta"]


def test_other_projects_batch_is_404(two_projects: tuple[kit.NimbusServer, str, str]) -> None:
    server, alpha_key, beta_key = two_projects
    with kit.make_client(server.api_base, api_key=alpha_key) as alpha, kit.make_client(
        server.api_base, api_key=beta_key
    ) as beta:
        alpha_file = kit.upload_batch_input(alpha, [kit.chat_line("a", "Hi")])
        batch = create(alpha, alpha_file.id)
        with pytest.raises(openai.NotFoundError) as raised:
            beta.batches.retrieve(batch.id)
        assert kit.error_envelope(raised.value.response)["message"] == f"No such Batch object: {batch.id}"
        with pytest.raises(openai.NotFoundError):
            beta.batches.cancel(batch.id)
        assert batch.id not in {b.id for b in beta.batches.list()}
        assert batch.id in {b.id for b in alpha.batches.list()}
        # Nor can beta use alpha's input file.
        with pytest.raises(openai.NotFoundError) as raised:
            create(beta, alpha_file.id)
        assert kit.error_envelope(raised.value.response)["message"] == f"No such File object: {alpha_file.id}"

        # The same Idempotency-Key in two projects makes two batches.
        key = f"shared-{uuid.uuid4()}"
        beta_file = kit.upload_batch_input(beta, [kit.chat_line("b", "Hi")])
        from_alpha = create(alpha, alpha_file.id, extra_headers={"Idempotency-Key": key})
        from_beta = create(beta, beta_file.id, extra_headers={"Idempotency-Key": key})
        assert from_alpha.id != from_beta.id
        assert from_beta.input_file_id == beta_file.id

        done = kit.wait_for_batch(alpha, batch.id)
        assert done.status == "completed", done
        # Its output file belongs to alpha too.
        assert done.output_file_id is not None
        with pytest.raises(openai.NotFoundError):
            beta.files.retrieve(done.output_file_id)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/batches"),
        ("POST", "/v1/batches"),
        ("GET", f"/v1/batches/{MISSING_BATCH}"),
        ("POST", f"/v1/batches/{MISSING_BATCH}/cancel"),
    ],
)
def test_batches_routes_need_a_key(two_projects: tuple[kit.NimbusServer, str, str], method: str, path: str) -> None:
    server, _, _ = two_projects
    response = requests.request(method, f"{server.base_url}{path}", timeout=30)
    assert response.status_code == 401, f"{method} {path}: HTTP {response.status_code}: {response.text}"
    assert kit.error_envelope(response)["code"] in {"invalid_api_key", "missing_api_key"}
