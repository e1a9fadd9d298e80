"""`/v1/uploads` on the local server: create, add parts, complete (assembled in `part_ids` order,
size and MD5 checked), cancel, the errors of each step, and the SDK's `upload_file_chunked` for a
20 MB file."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import openai
import pytest
import requests

import nimbus_testkit as kit

MIB = 1024 * 1024
UPLOAD_KEYS = {"id", "object", "bytes", "created_at", "filename", "purpose", "status", "expires_at", "file"}
PART_KEYS = {"id", "object", "created_at", "upload_id"}


def new_upload(client: openai.OpenAI, size: int, *, filename: str = "upload.txt", purpose: str = "assistants") -> Any:
    return client.uploads.create(
        bytes=size, filename=filename, mime_type="text/plain", purpose=purpose  # type: ignore[arg-type]
    )


def file_ids(client: openai.OpenAI) -> set[str]:
    return {f.id for f in client.files.list()}


def check_error(response: requests.Response, status: int, *, param: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, f"HTTP {response.status_code}: {response.text}"
    error = kit.error_envelope(response)
    if param is not None:
        assert error["param"] == param, error
    return error


def post_part(server: kit.NimbusServer, upload_id: str, data: bytes) -> requests.Response:
    body, content_type = kit.multipart_body([("data", ("blob", data, "application/octet-stream"))])
    return requests.post(
        f"{server.api_base}/uploads/{upload_id}/parts", data=body, headers={"Content-Type": content_type}, timeout=30
    )


def post_json(server: kit.NimbusServer, path: str, body: Any = None) -> requests.Response:
    return requests.post(f"{server.api_base}{path}", json=body, timeout=30)


def upload_blobs(server: kit.NimbusServer, upload_id: str, project: str = "default") -> list[Path]:
    root = server.data_dir / "blobs" / "objects" / "projects" / project / "uploads" / upload_id
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def file_blobs(server: kit.NimbusServer, project: str = "default") -> set[str]:
    root = server.data_dir / "blobs" / "objects" / "projects" / project / "files"
    return {p.name for p in root.iterdir()} if root.is_dir() else set()


# --------------------------------------------------------------------------------------------
# The happy path
# --------------------------------------------------------------------------------------------


def test_create_upload_shape(nimbus_server: kit.NimbusServer) -> None:
    response = post_json(
        nimbus_server,
        "/uploads",
        {"filename": "shape.jsonl", "purpose": "batch", "bytes": 1234, "mime_type": "application/jsonl"},
    )
    assert response.status_code == 200, response.text
    upload = response.json()
    assert set(upload) == UPLOAD_KEYS, upload
    assert upload["id"].startswith("upload_")
    assert upload["object"] == "upload"
    assert upload["status"] == "pending"
    assert upload["bytes"] == 1234
    assert upload["filename"] == "shape.jsonl"
    assert upload["purpose"] == "batch"
    assert upload["file"] is None
    assert abs(upload["created_at"] - time.time()) < 600
    assert upload["expires_at"] == upload["created_at"] + 3600


def test_parts_then_complete_in_part_ids_order(nimbus_server: kit.NimbusServer, client: openai.OpenAI) -> None:
    pieces = [b"first-", b"second-", b"third\n"]
    upload = new_upload(client, sum(map(len, pieces)), filename="ordered.txt")
    parts = []
    for piece in pieces:
        response = post_part(nimbus_server, upload.id, piece)
        assert response.status_code == 200, response.text
        part = response.json()
        assert set(part) == PART_KEYS, part
        assert part["id"].startswith("part_")
        assert part["object"] == "upload.part"
        assert part["upload_id"] == upload.id
        assert abs(part["created_at"] - time.time()) < 600
        parts.append(part)
    # Complete in another order than the parts were sent: the file follows part_ids.
    order = [2, 0, 1]
    completed = client.uploads.complete(upload_id=upload.id, part_ids=[parts[i]["id"] for i in order])
    assert completed.id == upload.id
    assert completed.status == "completed"
    assert completed.file is not None
    file = completed.file
    assert file.id.startswith("file-")
    assert file.object == "file"
    assert file.bytes == upload.bytes
    assert file.filename == "ordered.txt"
    assert file.purpose == "assistants"
    assert file.status == "processed"
    assert client.files.retrieve(file.id) == file
    assert client.files.content(file.id).read() == b"".join(pieces[i] for i in order)
    assert file.id in file_ids(client)
    assert upload_blobs(nimbus_server, upload.id) == [], "parts were kept after completion"


def test_complete_with_the_right_md5(client: openai.OpenAI) -> None:
    data = b"checksummed bytes" * 100
    upload = new_upload(client, len(data))
    part = client.uploads.parts.create(upload_id=upload.id, data=data)
    completed = client.uploads.complete(upload_id=upload.id, part_ids=[part.id], md5=hashlib.md5(data).hexdigest())
    assert completed.status == "completed"
    assert client.files.content(completed.file.id).read() == data


def test_batch_upload_gets_the_batch_expiry(client: openai.OpenAI) -> None:
    data = b'{"custom_id":"a"}\n'
    upload = client.uploads.create(bytes=len(data), filename="in.jsonl", mime_type="application/jsonl", purpose="batch")
    part = client.uploads.parts.create(upload_id=upload.id, data=data)
    file = client.uploads.complete(upload_id=upload.id, part_ids=[part.id]).file
    assert file.purpose == "batch"
    assert file.expires_at == file.created_at + 30 * 24 * 3600


def test_cancel(nimbus_server: kit.NimbusServer, client: openai.OpenAI) -> None:
    upload = new_upload(client, 10)
    client.uploads.parts.create(upload_id=upload.id, data=b"12345")
    before = file_ids(client)
    cancelled = client.uploads.cancel(upload.id)
    assert cancelled.id == upload.id
    assert cancelled.status == "cancelled"
    assert cancelled.file is None
    assert file_ids(client) == before
    assert upload_blobs(nimbus_server, upload.id) == [], "parts were kept after cancelling"


def test_upload_file_chunked_20_mb(nimbus_server: kit.NimbusServer, client: openai.OpenAI, tmp_path: Path) -> None:
    path = tmp_path / "twenty.bin"
    size = 20 * MIB + 12_345  # the last part is short
    sha256, md5 = kit.write_random_file(path, size)
    upload = client.uploads.upload_file_chunked(
        file=path, mime_type="application/octet-stream", purpose="user_data", part_size=4 * MIB, md5=md5
    )
    assert upload.status == "completed", upload
    assert upload.file.bytes == size
    assert upload.file.filename == "twenty.bin"
    with client.files.with_streaming_response.content(upload.file.id) as response:
        assert kit.sha256_of_chunks(response.iter_bytes()) == (sha256, size)
    assert hashlib.sha256(client.files.content(upload.file.id).read()).hexdigest() == sha256
    assert upload_blobs(nimbus_server, upload.id) == []
    client.files.delete(upload.file.id)


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sent", [[b"abc"], [b"abc", b"defg", b"h"]], ids=["too-few-bytes", "too-many-bytes"])
def test_parts_must_add_up_to_the_declared_bytes(client: openai.OpenAI, sent: list[bytes]) -> None:
    upload = new_upload(client, 5)
    part_ids = [client.uploads.parts.create(upload_id=upload.id, data=piece).id for piece in sent]
    before = file_ids(client)
    with pytest.raises(openai.BadRequestError) as raised:
        client.uploads.complete(upload_id=upload.id, part_ids=part_ids)
    assert raised.value.param == "part_ids"
    kit.error_envelope(raised.value.response)
    assert file_ids(client) == before


def test_a_subset_of_parts_that_adds_up_is_fine(client: openai.OpenAI) -> None:
    upload = new_upload(client, 4)
    keep = client.uploads.parts.create(upload_id=upload.id, data=b"keep")
    client.uploads.parts.create(upload_id=upload.id, data=b"unused part")
    completed = client.uploads.complete(upload_id=upload.id, part_ids=[keep.id])
    assert client.files.content(completed.file.id).read() == b"keep"


def test_wrong_md5_leaves_nothing_behind(nimbus_server: kit.NimbusServer, client: openai.OpenAI) -> None:
    data = b"the real bytes"
    upload = new_upload(client, len(data), filename="md5-mismatch.txt")
    part = client.uploads.parts.create(upload_id=upload.id, data=data)
    before_ids, before_blobs = file_ids(client), file_blobs(nimbus_server)
    with pytest.raises(openai.BadRequestError) as raised:
        client.uploads.complete(upload_id=upload.id, part_ids=[part.id], md5=hashlib.md5(b"other bytes").hexdigest())
    assert raised.value.status_code == 400
    assert raised.value.param == "md5"
    kit.error_envelope(raised.value.response)
    assert file_ids(client) == before_ids, "a file appeared although the MD5 was wrong"
    assert all(f.filename != "md5-mismatch.txt" for f in client.files.list())
    assert file_blobs(nimbus_server) == before_blobs, "half-written bytes were left in the blob store"


@pytest.mark.parametrize("end", ["complete", "cancel"])
def test_a_finished_upload_takes_no_more_changes(
    nimbus_server: kit.NimbusServer, client: openai.OpenAI, end: str
) -> None:
    upload = new_upload(client, 3)
    part = client.uploads.parts.create(upload_id=upload.id, data=b"xyz")
    if end == "complete":
        assert client.uploads.complete(upload_id=upload.id, part_ids=[part.id]).status == "completed"
    else:
        assert client.uploads.cancel(upload.id).status == "cancelled"
    check_error(post_part(nimbus_server, upload.id, b"more"), 400)
    check_error(post_json(nimbus_server, f"/uploads/{upload.id}/complete", {"part_ids": [part.id]}), 400)
    check_error(post_json(nimbus_server, f"/uploads/{upload.id}/cancel"), 400)


@pytest.mark.parametrize("upload_id", ["upload_doesnotexist", "upload_01a200ddbabd76b8b13935addc23179e", "nope"])
def test_unknown_upload_is_404(nimbus_server: kit.NimbusServer, upload_id: str) -> None:
    for response in (
        post_part(nimbus_server, upload_id, b"data"),
        post_json(nimbus_server, f"/uploads/{upload_id}/complete", {"part_ids": ["part_x"]}),
        post_json(nimbus_server, f"/uploads/{upload_id}/cancel"),
    ):
        error = check_error(response, 404)
        assert error["message"] == f"No such Upload object: {upload_id}", error


def test_part_of_another_upload_is_400(client: openai.OpenAI) -> None:
    mine = new_upload(client, 4)
    theirs = new_upload(client, 4)
    foreign = client.uploads.parts.create(upload_id=theirs.id, data=b"abcd")
    with pytest.raises(openai.BadRequestError) as raised:
        client.uploads.complete(upload_id=mine.id, part_ids=[foreign.id])
    assert raised.value.param == "part_ids"
    # Both uploads are still usable.
    own = client.uploads.parts.create(upload_id=mine.id, data=b"mine")
    assert client.uploads.complete(upload_id=mine.id, part_ids=[own.id]).status == "completed"
    assert client.uploads.complete(upload_id=theirs.id, part_ids=[foreign.id]).status == "completed"


def test_unknown_part_id_is_400(client: openai.OpenAI) -> None:
    upload = new_upload(client, 4)
    with pytest.raises(openai.BadRequestError) as raised:
        client.uploads.complete(upload_id=upload.id, part_ids=["part_doesnotexist"])
    assert raised.value.param == "part_ids"


def test_empty_part_ids_is_400(nimbus_server: kit.NimbusServer, client: openai.OpenAI) -> None:
    upload = new_upload(client, 4)
    check_error(post_json(nimbus_server, f"/uploads/{upload.id}/complete", {"part_ids": []}), 400)


@pytest.mark.parametrize("filename", ["data.txt", "data.json", "jsonl"])
def test_batch_upload_needs_a_jsonl_name(client: openai.OpenAI, filename: str) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.uploads.create(bytes=10, filename=filename, mime_type="application/jsonl", purpose="batch")
    assert "Must be .jsonl" in raised.value.message


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"filename": "a.txt", "purpose": "nonsense", "bytes": 1, "mime_type": "text/plain"}, "purpose"),
        ({"filename": "a.txt", "purpose": "batch_output", "bytes": 1, "mime_type": "text/plain"}, "purpose"),
        ({"purpose": "assistants", "bytes": 1, "mime_type": "text/plain"}, "filename"),
        ({"filename": "a.txt", "bytes": 1, "mime_type": "text/plain"}, "purpose"),
        ({"filename": "a.txt", "purpose": "assistants", "mime_type": "text/plain"}, "bytes"),
        ({"filename": "a.txt", "purpose": "assistants", "bytes": 1}, "mime_type"),
        ({"filename": "a.txt", "purpose": "assistants", "bytes": -1, "mime_type": "text/plain"}, "bytes"),
    ],
    ids=["bad-purpose", "output-purpose", "no-filename", "no-purpose", "no-bytes", "no-mime-type", "negative-bytes"],
)
def test_create_upload_validation(nimbus_server: kit.NimbusServer, body: dict[str, Any], param: str) -> None:
    check_error(post_json(nimbus_server, "/uploads", body), 400, param=param)


@pytest.mark.parametrize(("purpose", "size"), [("batch", 200 * MIB + 1), ("assistants", 512 * MIB + 1)])
def test_declared_size_over_the_limit_is_refused_up_front(
    nimbus_server: kit.NimbusServer, purpose: str, size: int
) -> None:
    name = "big.jsonl" if purpose == "batch" else "big.bin"
    response = post_json(
        nimbus_server, "/uploads", {"filename": name, "purpose": purpose, "bytes": size, "mime_type": "text/plain"}
    )
    assert response.status_code in {400, 413}, response.text
    kit.error_envelope(response)


@pytest.mark.parametrize(
    "content_type", ["application/octet-stream", "multipart/form-data"], ids=["raw-bytes", "multipart-without-boundary"]
)
def test_non_multipart_part_is_a_json_400(
    nimbus_server: kit.NimbusServer, client: openai.OpenAI, content_type: str
) -> None:
    """Every error answers with the OpenAI error envelope, also when the part is not multipart."""
    upload = new_upload(client, 5)
    response = requests.post(
        f"{nimbus_server.api_base}/uploads/{upload.id}/parts",
        data=b"hello",
        headers={"Content-Type": content_type},
        timeout=30,
    )
    assert response.status_code == 400, response.text
    assert response.headers.get("content-type", "").startswith("application/json"), (
        f"error body is {response.headers.get('content-type')!r}, not JSON: {response.text!r}"
    )
    kit.error_envelope(response)


def test_part_without_data_field_is_400(nimbus_server: kit.NimbusServer, client: openai.OpenAI) -> None:
    upload = new_upload(client, 4)
    body, content_type = kit.multipart_body([("other", "value")])
    url = f"{nimbus_server.api_base}/uploads/{upload.id}/parts"
    response = requests.post(url, data=body, headers={"Content-Type": content_type}, timeout=30)
    check_error(response, 400, param="data")


# --------------------------------------------------------------------------------------------
# Races
# --------------------------------------------------------------------------------------------


def concurrently(calls: list[Any]) -> list[requests.Response]:
    """Each of `calls` in its own thread, released together; responses in the order of `calls`."""
    import threading  # noqa: PLC0415

    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        barrier.wait()
        results[index] = calls[index]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


@pytest.mark.parametrize("attempt", range(3))
def test_concurrent_completes_make_one_file(
    nimbus_server: kit.NimbusServer, client: openai.OpenAI, attempt: int
) -> None:
    upload = new_upload(client, 4, filename=f"race-complete-{attempt}.txt")
    part = client.uploads.parts.create(upload_id=upload.id, data=b"race")
    url = f"{nimbus_server.api_base}/uploads/{upload.id}/complete"
    responses = concurrently([lambda: requests.post(url, json={"part_ids": [part.id]}, timeout=30)] * 6)
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [400] * 5, [(r.status_code, r.text) for r in responses]
    made = [f for f in client.files.list() if f.filename == f"race-complete-{attempt}.txt"]
    assert len(made) == 1
    assert made[0].id == next(r for r in responses if r.status_code == 200).json()["file"]["id"]


@pytest.mark.parametrize("attempt", range(3))
def test_complete_racing_cancel_has_one_outcome(
    nimbus_server: kit.NimbusServer, client: openai.OpenAI, attempt: int
) -> None:
    upload = new_upload(client, 4, filename=f"race-cancel-{attempt}.txt")
    part = client.uploads.parts.create(upload_id=upload.id, data=b"race")
    base = f"{nimbus_server.api_base}/uploads/{upload.id}"
    complete, cancel = concurrently(
        [
            lambda: requests.post(f"{base}/complete", json={"part_ids": [part.id]}, timeout=30),
            lambda: requests.post(f"{base}/cancel", timeout=30),
        ]
    )
    assert sorted([complete.status_code, cancel.status_code]) == [200, 400], (complete.text, cancel.text)
    made = [f for f in client.files.list() if f.filename == f"race-cancel-{attempt}.txt"]
    if complete.status_code == 200:
        assert complete.json()["status"] == "completed" and len(made) == 1
    else:
        assert cancel.json()["status"] == "cancelled" and made == []
