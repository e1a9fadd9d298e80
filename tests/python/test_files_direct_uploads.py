"""Direct uploads (a Nimbus extension): `POST /v1/direct_uploads` reserves a file and answers where
to PUT its bytes. Locally that is `PUT /v1/files/{id}/content` on the server itself; the file is
`uploaded` until the bytes land, then `processed` (or `error` if their size differs)."""

from __future__ import annotations

import hashlib
import time
from typing import Any

import openai
import pytest
import requests

import nimbus_testkit as kit

MIB = 1024 * 1024
DIRECT_KEYS = {"object", "file", "upload_url", "method", "upload_headers", "expires_at"}
FILE_KEYS = {"id", "object", "bytes", "created_at", "filename", "purpose", "status", "expires_at", "status_details"}


def create_direct(server: kit.NimbusServer, **body: Any) -> requests.Response:
    return requests.post(f"{server.api_base}/direct_uploads", json=body, timeout=30)


def direct(server: kit.NimbusServer, **body: Any) -> dict[str, Any]:
    response = create_direct(server, **body)
    assert response.status_code == 200, response.text
    return response.json()


def check_error(response: requests.Response, status: int, *, param: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, f"HTTP {response.status_code}: {response.text}"
    error = kit.error_envelope(response)
    if param is not None:
        assert error["param"] == param, error
    return error


def test_create_shape(nimbus_server: kit.NimbusServer) -> None:
    target = direct(nimbus_server, filename="direct.txt", purpose="user_data", bytes=11)
    assert set(target) == DIRECT_KEYS, target
    assert target["object"] == "direct_upload"
    assert target["method"] == "PUT"
    file = target["file"]
    assert set(file) == FILE_KEYS, file
    assert file["id"].startswith("file-")
    assert file["object"] == "file"
    assert file["status"] == "uploaded"
    assert file["bytes"] == 11
    assert file["filename"] == "direct.txt"
    assert file["purpose"] == "user_data"
    assert file["expires_at"] is None
    assert abs(file["created_at"] - time.time()) < 600
    assert target["upload_url"] == f"{nimbus_server.base_url}/v1/files/{file['id']}/content"
    assert target["upload_headers"] == {}, "locally nothing is signed into the URL"
    assert target["expires_at"] > file["created_at"]


def test_declared_sha256_takes_only_those_bytes(nimbus_server: kit.NimbusServer, client: openai.OpenAI) -> None:
    data = b'{"custom_id": "a"}\n'
    target = direct(
        nimbus_server, filename="checked.jsonl", purpose="batch", bytes=len(data), sha256=hashlib.sha256(data).hexdigest()
    )
    file_id = target["file"]["id"]
    other = data.replace(b"a", b"b")
    check_error(requests.put(target["upload_url"], data=other, timeout=30), 400, param="sha256")
    assert client.files.retrieve(file_id).status == "uploaded", "refused bytes leave the file waiting"
    put = requests.put(target["upload_url"], data=data, headers=target["upload_headers"], timeout=30)
    assert put.status_code == 200, put.text
    assert client.files.retrieve(file_id).status == "processed"
    assert client.files.content(file_id).read() == data
    check_error(requests.put(target["upload_url"], data=data, timeout=30), 400)


def test_put_then_processed(nimbus_server: kit.NimbusServer, client: openai.OpenAI) -> None:
    data = bytes(range(256)) * 40
    target = direct(nimbus_server, filename="landed.bin", purpose="vision", bytes=len(data))
    file_id = target["file"]["id"]
    assert client.files.retrieve(file_id).status == "uploaded"
    assert file_id in {f.id for f in client.files.list()}
    put = requests.put(target["upload_url"], data=data, headers={"Authorization": "Bearer local"}, timeout=30)
    assert put.status_code == 200, put.text
    waited = client.files.wait_for_processing(file_id, poll_interval=0.1, max_wait_seconds=10)
    assert waited.status == "processed"
    assert waited.bytes == len(data)
    assert waited.status_details is None
    assert client.files.retrieve(file_id).status == "processed"
    assert client.files.content(file_id).read() == data
    listed = {f.id: f for f in client.files.list(purpose="vision")}
    assert listed[file_id].status == "processed"


def test_put_of_several_megabytes_streams(nimbus_server: kit.NimbusServer, client: openai.OpenAI) -> None:
    size = 9 * MIB + 7
    block = bytes(range(256)) * 4096  # 1 MiB

    def body():
        left = size
        while left:
            piece = block[: min(left, len(block))]
            left -= len(piece)
            yield piece

    target = direct(nimbus_server, filename="big-direct.bin", purpose="assistants", bytes=size)
    put = requests.put(target["upload_url"], data=body(), timeout=60)
    assert put.status_code == 200, put.text
    file_id = target["file"]["id"]
    assert client.files.wait_for_processing(file_id, poll_interval=0.1, max_wait_seconds=10).status == "processed"
    with client.files.with_streaming_response.content(file_id) as response:
        digest = kit.sha256_of_chunks(response.iter_bytes())
    assert digest == kit.sha256_of_chunks(body())
    client.files.delete(file_id)


def test_fewer_bytes_than_declared_is_an_error_status(nimbus_server: kit.NimbusServer, client: openai.OpenAI) -> None:
    target = direct(nimbus_server, filename="short.txt", purpose="assistants", bytes=100)
    file_id = target["file"]["id"]
    requests.put(target["upload_url"], data=b"only ten!!", timeout=30)
    waited = client.files.wait_for_processing(file_id, poll_interval=0.1, max_wait_seconds=10)
    assert waited.status == "error"
    assert isinstance(waited.status_details, str) and waited.status_details
    assert client.files.retrieve(file_id).status == "error"


def test_more_bytes_than_declared_is_not_processed(nimbus_server: kit.NimbusServer, client: openai.OpenAI) -> None:
    target = direct(nimbus_server, filename="long.txt", purpose="assistants", bytes=4)
    file_id = target["file"]["id"]
    put = requests.put(target["upload_url"], data=b"far more than four bytes", timeout=30)
    assert put.status_code >= 400, put.text
    kit.error_envelope(put)
    assert client.files.retrieve(file_id).status != "processed"


def test_put_twice_is_400(nimbus_server: kit.NimbusServer, client: openai.OpenAI) -> None:
    target = direct(nimbus_server, filename="twice.txt", purpose="assistants", bytes=3)
    assert requests.put(target["upload_url"], data=b"one", timeout=30).status_code == 200
    check_error(requests.put(target["upload_url"], data=b"two", timeout=30), 400)
    assert client.files.content(target["file"]["id"]).read() == b"one"


def test_put_to_a_regular_file_is_400(nimbus_server: kit.NimbusServer, client: openai.OpenAI) -> None:
    regular = client.files.create(file=("regular.txt", b"keep me"), purpose="assistants")
    response = requests.put(f"{nimbus_server.api_base}/files/{regular.id}/content", data=b"overwrite", timeout=30)
    check_error(response, 400)
    assert client.files.content(regular.id).read() == b"keep me"


def test_put_to_an_unknown_file_is_404(nimbus_server: kit.NimbusServer) -> None:
    response = requests.put(f"{nimbus_server.api_base}/files/file-doesnotexist/content", data=b"x", timeout=30)
    assert check_error(response, 404)["message"] == "No such File object: file-doesnotexist"


def test_deleted_before_put(nimbus_server: kit.NimbusServer, client: openai.OpenAI) -> None:
    target = direct(nimbus_server, filename="gone.txt", purpose="assistants", bytes=1)
    client.files.delete(target["file"]["id"])
    check_error(requests.put(target["upload_url"], data=b"x", timeout=30), 404)


def test_expires_after(nimbus_server: kit.NimbusServer) -> None:
    target = direct(
        nimbus_server,
        filename="short-lived.txt",
        purpose="assistants",
        bytes=1,
        expires_after={"anchor": "created_at", "seconds": 7200},
    )
    assert target["file"]["expires_at"] == target["file"]["created_at"] + 7200


def test_batch_default_expiry(nimbus_server: kit.NimbusServer) -> None:
    target = direct(nimbus_server, filename="in.jsonl", purpose="batch", bytes=10)
    assert target["file"]["expires_at"] == target["file"]["created_at"] + 30 * 24 * 3600


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"filename": "a.txt", "purpose": "nonsense", "bytes": 1}, 400, "purpose"),
        ({"filename": "a.txt", "purpose": "batch", "bytes": 1}, 400, None),
        (
            {
                "filename": "a.txt",
                "purpose": "assistants",
                "bytes": 1,
                "expires_after": {"anchor": "created_at", "seconds": 60},
            },
            400,
            None,
        ),
        ({"purpose": "assistants", "bytes": 1}, 400, "filename"),
        ({"filename": "a.txt", "purpose": "assistants"}, 400, "bytes"),
        ({"filename": "a.txt", "purpose": "assistants", "bytes": 1, "sha256": "d41d8cd98f00b204"}, 400, "sha256"),
        ({"filename": "a.txt", "purpose": "assistants", "bytes": 1, "sha256": 12}, 400, "sha256"),
    ],
    ids=["bad-purpose", "batch-not-jsonl", "expiry-too-short", "no-filename", "no-bytes", "short-sha256", "sha256-not-a-string"],
)
def test_create_validation(
    nimbus_server: kit.NimbusServer, body: dict[str, Any], status: int, param: str | None
) -> None:
    check_error(create_direct(nimbus_server, **body), status, param=param)


@pytest.mark.parametrize(
    ("purpose", "name", "size"), [("batch", "a.jsonl", 200 * MIB + 1), ("assistants", "a.bin", 512 * MIB + 1)]
)
def test_declared_size_over_the_limit_is_413(
    nimbus_server: kit.NimbusServer, purpose: str, name: str, size: int
) -> None:
    check_error(create_direct(nimbus_server, filename=name, purpose=purpose, bytes=size), 413)
