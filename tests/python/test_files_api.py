"""`/v1/files` on the local server: create (multipart, fields in any order, purposes, expiry, size
limits), retrieve, content, delete, and listing with cursors and an exact `has_more`.

Most tests share the open session server (`nimbus_server`, project `default`); the listing tests
get a server of their own so they know exactly which files exist.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import requests

import nimbus_testkit as kit

MIB = 1024 * 1024
BATCH_LIMIT = 200 * MIB
FILE_LIMIT = 512 * MIB
THIRTY_DAYS = 30 * 24 * 3600
PURPOSES = ["assistants", "batch", "fine-tune", "vision", "user_data", "evals"]
FILE_KEYS = {"id", "object", "bytes", "created_at", "filename", "purpose", "status", "expires_at", "status_details"}
JSONL = b'{"custom_id":"r1","method":"POST","url":"/v1/chat/completions","body":{"model":"dummy"}}\n'
# Bytes that trip naive multipart parsers: every byte value, CRLFs and a line that is almost the boundary.
TRICKY = bytes(range(256)) + b"\r\n--" + kit.MULTIPART_BOUNDARY.encode()[:-1] + b"--\r\n\r\n--\x00end\r\n"


def filename_for(purpose: str, stem: str = "data") -> str:
    return f"{stem}.jsonl" if purpose == "batch" else f"{stem}.txt"


def post_multipart(server: kit.NimbusServer, fields: list[tuple[str, Any]], **kwargs: Any) -> requests.Response:
    body, content_type = kit.multipart_body(fields)
    return requests.post(
        f"{server.api_base}/files", data=body, headers={"Content-Type": content_type, **kwargs}, timeout=30
    )


def check_file_object(file: dict[str, Any], *, filename: str, purpose: str, size: int) -> None:
    assert set(file) == FILE_KEYS, file
    assert file["id"].startswith("file-") and len(file["id"]) > len("file-"), file
    assert file["object"] == "file"
    assert file["bytes"] == size
    assert file["filename"] == filename
    assert file["purpose"] == purpose
    assert file["status"] == "processed"
    assert file["status_details"] is None
    assert isinstance(file["created_at"], int) and abs(file["created_at"] - time.time()) < 600, file


def check_error(response: requests.Response, status: int, *, param: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, f"HTTP {response.status_code}: {response.text}"
    content_type = response.headers.get("content-type", "")
    assert content_type.startswith("application/json"), f"error body is {content_type!r}, not JSON: {response.text!r}"
    error = kit.error_envelope(response)
    if param is not None:
        assert error["param"] == param, error
    return error


def blob_files(server: kit.NimbusServer, project: str = "default") -> set[str]:
    root = server.data_dir / "blobs" / "objects" / "projects" / project / "files"
    return {p.name for p in root.iterdir()} if root.is_dir() else set()


# --------------------------------------------------------------------------------------------
# Create
# --------------------------------------------------------------------------------------------


def test_create_with_the_sdk(client: openai.OpenAI) -> None:
    created = client.files.create(file=("notes.txt", b"hello files"), purpose="assistants")
    check_file_object(created.model_dump(), filename="notes.txt", purpose="assistants", size=11)
    assert created.expires_at is None


def test_create_from_a_path(client: openai.OpenAI, tmp_path: Path) -> None:
    path = tmp_path / "from-disk.jsonl"
    path.write_bytes(JSONL * 3)
    created = client.files.create(file=path, purpose="batch")
    assert created.filename == "from-disk.jsonl"
    assert created.bytes == len(JSONL) * 3
    assert client.files.content(created.id).read() == JSONL * 3


@pytest.mark.parametrize("purpose", PURPOSES)
def test_every_uploadable_purpose(client: openai.OpenAI, purpose: str) -> None:
    name = filename_for(purpose, f"p-{purpose}")
    created = client.files.create(file=(name, JSONL), purpose=purpose)  # type: ignore[arg-type]
    check_file_object(created.model_dump(), filename=name, purpose=purpose, size=len(JSONL))
    assert client.files.retrieve(created.id) == created


def test_batch_files_expire_after_30_days_by_default(client: openai.OpenAI) -> None:
    created = client.files.create(file=("input.jsonl", JSONL), purpose="batch")
    assert created.expires_at == created.created_at + THIRTY_DAYS


@pytest.mark.parametrize("purpose", [p for p in PURPOSES if p != "batch"])
def test_other_files_never_expire_by_default(client: openai.OpenAI, purpose: str) -> None:
    created = client.files.create(file=(filename_for(purpose), b"x"), purpose=purpose)  # type: ignore[arg-type]
    assert created.expires_at is None


@pytest.mark.parametrize("seconds", [3600, 86_400, 2_592_000])
@pytest.mark.parametrize("purpose", ["assistants", "batch"])
def test_expires_after_sets_expires_at(client: openai.OpenAI, purpose: str, seconds: int) -> None:
    created = client.files.create(
        file=(filename_for(purpose), JSONL),
        purpose=purpose,  # type: ignore[arg-type]
        expires_after={"anchor": "created_at", "seconds": seconds},
    )
    assert created.expires_at == created.created_at + seconds
    assert client.files.retrieve(created.id).expires_at == created.expires_at


@pytest.mark.parametrize("seconds", ["3599", "2592001", "0", "-5"])
def test_expires_after_out_of_range_is_400(nimbus_server: kit.NimbusServer, seconds: str) -> None:
    fields = [
        ("purpose", "assistants"),
        ("expires_after[anchor]", "created_at"),
        ("expires_after[seconds]", seconds),
        ("file", ("short-lived.txt", b"x", "text/plain")),
    ]
    check_error(post_multipart(nimbus_server, fields), 400, param="expires_after[seconds]")


def test_expires_after_other_anchor_is_400(nimbus_server: kit.NimbusServer) -> None:
    fields = [
        ("purpose", "assistants"),
        ("expires_after[anchor]", "last_active_at"),
        ("expires_after[seconds]", "3600"),
        ("file", ("anchor.txt", b"x", "text/plain")),
    ]
    error = check_error(post_multipart(nimbus_server, fields), 400)
    assert error["param"] and error["param"].startswith("expires_after"), error


FILE_FIELD = ("file", ("ordered.jsonl", TRICKY, "application/octet-stream"))
ORDERS = {
    "purpose-first": [("purpose", "batch"), FILE_FIELD],
    "file-first": [FILE_FIELD, ("purpose", "batch")],
    "expiry-around-file": [
        ("expires_after[seconds]", "7200"),
        FILE_FIELD,
        ("expires_after[anchor]", "created_at"),
        ("purpose", "batch"),
    ],
    "file-first-then-expiry": [
        FILE_FIELD,
        ("purpose", "batch"),
        ("expires_after[anchor]", "created_at"),
        ("expires_after[seconds]", "7200"),
    ],
    "unknown-fields-ignored": [("comment", "ignore me"), FILE_FIELD, ("x-extra", "also"), ("purpose", "batch")],
}


@pytest.mark.parametrize("order", list(ORDERS))
def test_multipart_fields_in_any_order(nimbus_server: kit.NimbusServer, client: openai.OpenAI, order: str) -> None:
    response = post_multipart(nimbus_server, ORDERS[order])
    assert response.status_code == 200, response.text
    file = response.json()
    check_file_object(file, filename="ordered.jsonl", purpose="batch", size=len(TRICKY))
    if any(name == "expires_after[seconds]" for name, _ in ORDERS[order]):
        assert file["expires_at"] == file["created_at"] + 7200
    else:
        assert file["expires_at"] == file["created_at"] + THIRTY_DAYS
    assert client.files.content(file["id"]).read() == TRICKY


@pytest.mark.parametrize("purpose", ["batch_output", "fine_tune", "Assistants", "", "nonsense"])
def test_unknown_purpose_is_400(client: openai.OpenAI, purpose: str) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.files.create(file=("bad-purpose.txt", b"x"), purpose=purpose)  # type: ignore[arg-type]
    assert raised.value.status_code == 400
    kit.error_envelope(raised.value.response)
    assert raised.value.param == "purpose"


def test_missing_purpose_is_400(nimbus_server: kit.NimbusServer) -> None:
    before = blob_files(nimbus_server)
    response = post_multipart(nimbus_server, [("file", ("no-purpose.txt", b"abc", "text/plain"))])
    check_error(response, 400, param="purpose")
    assert blob_files(nimbus_server) == before, "the bytes of a rejected file were left behind"


def test_missing_file_is_400(nimbus_server: kit.NimbusServer) -> None:
    check_error(post_multipart(nimbus_server, [("purpose", "assistants")]), 400, param="file")


def test_batch_file_must_be_jsonl(nimbus_server: kit.NimbusServer) -> None:
    before = blob_files(nimbus_server)
    for fields in (
        [("purpose", "batch"), ("file", ("input.txt", JSONL, "text/plain"))],
        [("file", ("input.json", JSONL, "application/json")), ("purpose", "batch")],
    ):
        error = check_error(post_multipart(nimbus_server, fields), 400, param="file")
        assert error["message"] == "Invalid file format for Batch API. Must be .jsonl", error
    assert blob_files(nimbus_server) == before


def test_batch_rule_via_the_sdk(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.files.create(file=("input.csv", b"a,b\n"), purpose="batch")
    assert raised.value.param == "file"
    assert "Must be .jsonl" in raised.value.message


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"this is not multipart at all", id="garbage"),
        pytest.param(
            f"--{kit.MULTIPART_BOUNDARY}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch".encode(),
            id="truncated",
        ),
        pytest.param(b"", id="empty"),
    ],
)
def test_malformed_multipart_is_400(nimbus_server: kit.NimbusServer, body: bytes) -> None:
    response = requests.post(
        f"{nimbus_server.api_base}/files",
        data=body,
        headers={"Content-Type": f"multipart/form-data; boundary={kit.MULTIPART_BOUNDARY}"},
        timeout=30,
    )
    check_error(response, 400)


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        pytest.param("application/json", b'{"purpose":"assistants"}', id="json-body"),
        pytest.param("multipart/form-data", b"x", id="multipart-without-boundary"),
    ],
)
def test_non_multipart_create_is_a_json_400(nimbus_server: kit.NimbusServer, content_type: str, body: bytes) -> None:
    """Every error answers with the OpenAI error envelope, also when the body is not multipart."""
    response = requests.post(
        f"{nimbus_server.api_base}/files", data=body, headers={"Content-Type": content_type}, timeout=30
    )
    check_error(response, 400)


# --------------------------------------------------------------------------------------------
# Size limits (streamed from a generator: nothing large is held in memory)
# --------------------------------------------------------------------------------------------


def streamed_create(server: kit.NimbusServer, *, purpose: str, filename: str, size: int, purpose_first: bool):
    # The server stores up to `size` bytes before it can tell the file is too large.
    free = shutil.disk_usage(server.data_dir).free
    if free < size + 64 * MIB:
        pytest.skip(f"only {free // MIB} MiB free under {server.data_dir}; this test needs about {size // MIB} MiB")
    boundary = kit.MULTIPART_BOUNDARY
    purpose_part = f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n{purpose}\r\n'.encode()
    file_head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()

    def body() -> Iterator[bytes]:
        if purpose_first:
            yield purpose_part
        yield file_head
        block = b"\x00" * MIB
        left = size
        while left:
            piece = block[: min(left, MIB)]
            left -= len(piece)
            yield piece
        yield b"\r\n"
        if not purpose_first:
            yield purpose_part
        yield f"--{boundary}--\r\n".encode()

    try:
        return requests.post(
            f"{server.api_base}/files",
            data=body(),
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
            timeout=120,
        )
    except requests.ConnectionError as err:  # the server may answer and close before reading everything
        pytest.fail(f"the server dropped the connection instead of answering 413: {err}")


@pytest.mark.parametrize("purpose_first", [True, False], ids=["purpose-first", "purpose-last"])
def test_batch_file_over_200_mib_is_413(
    nimbus_server: kit.NimbusServer, client: openai.OpenAI, purpose_first: bool
) -> None:
    before = blob_files(nimbus_server)
    response = streamed_create(
        nimbus_server, purpose="batch", filename="too-big.jsonl", size=BATCH_LIMIT + 1, purpose_first=purpose_first
    )
    check_error(response, 413)
    assert blob_files(nimbus_server) == before, "the bytes of a rejected file were left behind"
    assert all(f.filename != "too-big.jsonl" for f in client.files.list())


def test_batch_file_of_exactly_200_mib_is_accepted(nimbus_server: kit.NimbusServer, client: openai.OpenAI) -> None:
    response = streamed_create(
        nimbus_server, purpose="batch", filename="just-fits.jsonl", size=BATCH_LIMIT, purpose_first=True
    )
    assert response.status_code == 200, response.text
    assert response.json()["bytes"] == BATCH_LIMIT
    client.files.delete(response.json()["id"])


def test_other_file_over_512_mib_is_413(nimbus_server: kit.NimbusServer, client: openai.OpenAI) -> None:
    before = blob_files(nimbus_server)
    response = streamed_create(
        nimbus_server, purpose="user_data", filename="too-big.bin", size=FILE_LIMIT + 1, purpose_first=True
    )
    check_error(response, 413)
    assert blob_files(nimbus_server) == before
    assert all(f.filename != "too-big.bin" for f in client.files.list(purpose="user_data"))


# --------------------------------------------------------------------------------------------
# Retrieve, content, delete
# --------------------------------------------------------------------------------------------


def test_retrieve_returns_the_created_object(client: openai.OpenAI) -> None:
    created = client.files.create(file=("retrieve-me.txt", b"abc"), purpose="user_data")
    assert client.files.retrieve(created.id) == created


def test_content_is_exactly_the_uploaded_bytes(nimbus_server: kit.NimbusServer, client: openai.OpenAI) -> None:
    created = client.files.create(file=("tricky.bin", TRICKY), purpose="vision")
    assert client.files.content(created.id).read() == TRICKY
    with client.files.with_streaming_response.content(created.id) as streamed:
        assert b"".join(streamed.iter_bytes()) == TRICKY
    raw = requests.get(f"{nimbus_server.api_base}/files/{created.id}/content", timeout=30)
    assert raw.status_code == 200
    assert raw.content == TRICKY
    assert raw.headers["content-length"] == str(len(TRICKY))


def test_delete_then_everything_is_404(nimbus_server: kit.NimbusServer, client: openai.OpenAI) -> None:
    created = client.files.create(file=("delete-me.txt", b"bye"), purpose="assistants")
    assert created.id in blob_files(nimbus_server)
    deleted = client.files.delete(created.id)
    assert deleted.model_dump() == {"id": created.id, "object": "file", "deleted": True}
    assert created.id not in blob_files(nimbus_server), "the bytes outlived the file"
    for call in (client.files.retrieve, client.files.content, client.files.delete):
        with pytest.raises(openai.NotFoundError) as raised:
            call(created.id)
        assert raised.value.status_code == 404
        error = kit.error_envelope(raised.value.response)
        assert error["message"] == f"No such File object: {created.id}", error
        assert error["param"] == "id", error
    assert created.id not in {f.id for f in client.files.list()}


@pytest.mark.parametrize(
    ("method", "suffix"), [("GET", ""), ("GET", "/content"), ("DELETE", "")], ids=["retrieve", "content", "delete"]
)
@pytest.mark.parametrize("file_id", ["file-doesnotexist", "file-01a200dd5afe75adb3ac673de1f5a83f", "not-a-file-id"])
def test_unknown_file_is_404(nimbus_server: kit.NimbusServer, method: str, suffix: str, file_id: str) -> None:
    response = requests.request(method, f"{nimbus_server.api_base}/files/{file_id}{suffix}", timeout=30)
    error = check_error(response, 404, param="id")
    assert error["message"] == f"No such File object: {file_id}", error
    assert response.headers.get("x-request-id")


# --------------------------------------------------------------------------------------------
# Listing (a server of its own: the exact set of files is known)
# --------------------------------------------------------------------------------------------

LISTED = 25
LIST_PURPOSES = ["assistants", "batch", "user_data"]


@pytest.fixture(scope="module")
def listing(
    server_factory: Callable[..., kit.NimbusServer]
) -> Iterator[tuple[kit.NimbusServer, openai.OpenAI, list[Any]]]:
    """A fresh server holding LISTED files (purposes cycling through LIST_PURPOSES), in creation order."""
    server = server_factory("nimbus-files-listing")
    sdk = kit.make_client(server.api_base)
    empty = sdk.files.list()
    assert empty.data == [] and empty.has_more is False
    created = [
        sdk.files.create(
            file=(filename_for(LIST_PURPOSES[i % 3], f"list-{i:02d}"), f"file {i}\n".encode()),
            purpose=LIST_PURPOSES[i % 3],  # type: ignore[arg-type]
        )
        for i in range(LISTED)
    ]
    try:
        yield server, sdk, created
    finally:
        sdk.close()


def raw_list(server: kit.NimbusServer, **params: Any) -> requests.Response:
    return requests.get(f"{server.api_base}/files", params=params, timeout=30)


def test_empty_list_shape(server_factory: Callable[..., kit.NimbusServer]) -> None:
    server = server_factory("nimbus-files-empty")
    response = raw_list(server)
    assert response.status_code == 200, response.text
    assert response.json() == {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}


def test_default_list_is_everything_newest_first(listing) -> None:
    server, _, created = listing
    body = raw_list(server).json()
    assert body["object"] == "list"
    ids = [f["id"] for f in body["data"]]
    assert ids == [f.id for f in reversed(created)]
    assert body["first_id"] == ids[0] and body["last_id"] == ids[-1]
    assert body["has_more"] is False
    assert all(set(f) == FILE_KEYS for f in body["data"])


def test_order_asc_is_creation_order(listing) -> None:
    server, sdk, created = listing
    page = sdk.files.list(order="asc")
    assert [f.id for f in page.data] == [f.id for f in created]
    assert page.has_more is False
    created_at = [f.created_at for f in page.data]
    assert created_at == sorted(created_at)


def test_bad_order_is_400(listing) -> None:
    server, _, _ = listing
    check_error(raw_list(server, order="sideways"), 400, param="order")


@pytest.mark.parametrize("order", ["desc", "asc"])
@pytest.mark.parametrize("limit", [1, 4, 5, 7, 24, 25, 26, 10_000])
def test_manual_paging_has_exact_has_more(listing, order: str, limit: int) -> None:
    server, _, created = listing
    expected = [f.id for f in (created if order == "asc" else reversed(created))]
    seen: list[str] = []
    after = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": limit, "order": order}
        if after:
            params["after"] = after
        body = raw_list(server, **params).json()
        pages += 1
        ids = [f["id"] for f in body["data"]]
        assert len(ids) <= limit
        seen += ids
        remaining = len(expected) - len(seen)
        assert body["has_more"] is (remaining > 0), f"page {pages}: has_more={body['has_more']} with {remaining} left"
        if ids:
            assert body["first_id"] == ids[0] and body["last_id"] == ids[-1]
        if not body["has_more"]:
            break
        assert ids, "has_more with an empty page"
        after = body["last_id"]
        assert pages <= LISTED + 1
    assert seen == expected
    assert pages == max(1, -(-LISTED // limit))


@pytest.mark.parametrize("order", ["desc", "asc"])
@pytest.mark.parametrize("limit", [1, 3, 5, 25, 100])
def test_sdk_auto_paging_yields_every_file_once(listing, order: str, limit: int) -> None:
    _, sdk, created = listing
    ids = [f.id for f in sdk.files.list(limit=limit, order=order)]  # type: ignore[arg-type]
    expected = [f.id for f in (created if order == "asc" else reversed(created))]
    assert ids == expected


@pytest.mark.parametrize("purpose", LIST_PURPOSES)
def test_purpose_filter_with_paging(listing, purpose: str) -> None:
    server, sdk, created = listing
    expected = [f.id for f in reversed(created) if f.purpose == purpose]
    assert [f.id for f in sdk.files.list(purpose=purpose, limit=3)] == expected
    first = raw_list(server, purpose=purpose, limit=len(expected)).json()
    assert [f["id"] for f in first["data"]] == expected and first["has_more"] is False
    short = raw_list(server, purpose=purpose, limit=len(expected) - 1).json()
    assert short["has_more"] is True


def test_purpose_filter_with_no_match(listing) -> None:
    server, _, _ = listing
    body = raw_list(server, purpose="evals").json()
    assert body["data"] == [] and body["has_more"] is False


def test_after_continues_from_that_file(listing) -> None:
    server, _, created = listing
    pivot = created[10]
    desc = raw_list(server, after=pivot.id).json()
    assert [f["id"] for f in desc["data"]] == [f.id for f in reversed(created[:10])]
    asc = raw_list(server, after=pivot.id, order="asc").json()
    assert [f["id"] for f in asc["data"]] == [f.id for f in created[11:]]


@pytest.mark.parametrize(
    ("limit", "code"),
    [
        ("0", "integer_below_min_value"),
        ("-1", "integer_below_min_value"),
        ("10001", "integer_above_max_value"),
        ("99999999999", "integer_above_max_value"),
    ],
)
def test_limit_out_of_range_is_400(listing, limit: str, code: str) -> None:
    server, sdk, _ = listing
    error = check_error(raw_list(server, limit=limit), 400, param="limit")
    assert error["code"] == code, error
    with pytest.raises(openai.BadRequestError) as raised:
        sdk.files.list(limit=int(limit))
    assert raised.value.code == code


@pytest.mark.parametrize("limit", ["1", "10000"])
def test_limit_bounds_are_accepted(listing, limit: str) -> None:
    server, _, _ = listing
    response = raw_list(server, limit=limit)
    assert response.status_code == 200, response.text
    assert len(response.json()["data"]) == min(int(limit), LISTED)


def test_deleted_file_leaves_the_list(listing) -> None:
    server, sdk, created = listing
    extra = sdk.files.create(file=("transient.txt", b"t"), purpose="assistants")
    assert raw_list(server, limit=1).json()["data"][0]["id"] == extra.id
    sdk.files.delete(extra.id)
    assert [f.id for f in sdk.files.list(limit=10)] == [f.id for f in reversed(created)]


# --------------------------------------------------------------------------------------------
# Races
# --------------------------------------------------------------------------------------------


def concurrently(count: int, call: Callable[[], requests.Response]) -> list[requests.Response]:
    """`call` from `count` threads released together."""
    import threading  # noqa: PLC0415

    barrier = threading.Barrier(count)
    results: list[requests.Response] = []
    lock = threading.Lock()

    def run() -> None:
        barrier.wait()
        response = call()
        with lock:
            results.append(response)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


@pytest.mark.parametrize("attempt", range(5))
def test_concurrent_deletes_one_wins_the_rest_404(
    nimbus_server: kit.NimbusServer, client: openai.OpenAI, attempt: int
) -> None:
    file = client.files.create(file=(f"race-{attempt}.txt", b"race"), purpose="assistants")
    url = f"{nimbus_server.api_base}/files/{file.id}"
    responses = concurrently(8, lambda: requests.delete(url, timeout=30))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [404] * 7, [(r.status_code, r.text) for r in responses]
