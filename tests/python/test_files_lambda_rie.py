"""The `nimbus-files` Lambda binary under the Runtime Interface Emulator, with its state and bytes in
moto, driven by the `infra/events/files-*.json` event files (HTTP API payload 2.0; multipart bodies
base64-encoded with `isBase64Encoded: true`, as API Gateway sends binary bodies).

The placeholder bearer is replaced by a key created with `nimbus keys create --backend aws
--project demo`; the placeholder file id in the retrieve/content/delete events by the id of a file
created through `files-create.json` first.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

import nimbus_testkit as kit

PROJECT = "demo"
FILE_ID_PLACEHOLDER = "file-REPLACE_WITH_FILE_ID"
INLINE_LIMIT = 4 * 1024 * 1024
FILE_KEYS = {"id", "object", "bytes", "created_at", "filename", "purpose", "status", "expires_at", "status_details"}
UPLOAD_KEYS = {"id", "object", "bytes", "created_at", "filename", "purpose", "status", "expires_at", "file"}
EVENT_NAMES = [path.name for path in kit.event_files("files-*.json")]
NEEDS_FILE_ID = {"files-retrieve.json", "files-content.json", "files-delete.json"}


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def invoke(function: kit.LambdaUnderRie, event: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    """Invoke; check the proxy response shape; return status, lower-cased headers and body bytes."""
    result = function.invoke(event)
    assert isinstance(result, dict) and isinstance(result.get("statusCode"), int), result
    headers = kit.response_headers(result)
    assert headers.get("x-request-id"), f"no x-request-id in {result}"
    body = result.get("body") or ""
    raw = base64.b64decode(body) if result.get("isBase64Encoded") else body.encode()
    return result["statusCode"], headers, raw


def invoke_json(function: kit.LambdaUnderRie, event: dict[str, Any]) -> tuple[int, Any]:
    status, headers, raw = invoke(function, event)
    assert headers.get("content-type", "").startswith("application/json"), (status, headers, raw[:300])
    return status, json.loads(raw)


def multipart_request_body(event: dict[str, Any]) -> tuple[bytes, str]:
    """The decoded multipart body of an event and its boundary."""
    content_type = event["headers"]["content-type"]
    match = re.fullmatch(r"multipart/form-data; boundary=(\S+)", content_type)
    assert match, content_type
    return base64.b64decode(event["body"], validate=True), match.group(1)


def with_request(
    event: dict[str, Any],
    method: str,
    path: str,
    *,
    query: dict[str, str] | None = None,
    body: bytes | None = None,
    content_type: str | None = None,
) -> dict[str, Any]:
    """A copy of an (authorized) event for another request: method, path, query and body set as
    API Gateway would (binary bodies base64-encoded, content-length of the raw bytes)."""
    event = json.loads(json.dumps(event))
    event["rawPath"] = path
    event["requestContext"]["http"]["method"] = method
    event["requestContext"]["http"]["path"] = path
    event["rawQueryString"] = "&".join(f"{k}={v}" for k, v in (query or {}).items())
    event.pop("queryStringParameters", None)
    if query:
        event["queryStringParameters"] = dict(query)
    headers = {k: v for k, v in event["headers"].items() if k not in {"content-length", "content-type"}}
    event.pop("body", None)
    event["isBase64Encoded"] = False
    if body is not None:
        headers["content-length"] = str(len(body))
        headers["content-type"] = content_type or "application/octet-stream"
        if headers["content-type"].startswith("application/json"):
            event["body"] = body.decode()
        else:
            event["body"] = base64.b64encode(body).decode()
            event["isBase64Encoded"] = True
    event["headers"] = headers
    return event


def create_event(base: dict[str, Any], filename: str, content: bytes, purpose: str) -> dict[str, Any]:
    body, content_type = kit.multipart_body(
        [("purpose", purpose), ("file", (filename, content, "application/octet-stream"))]
    )
    return with_request(base, "POST", "/v1/files", body=body, content_type=content_type)


def s3_object(moto: kit.MotoServer, key: str) -> bytes | None:
    s3 = moto.client("s3")
    try:
        return s3.get_object(Bucket=moto.bucket, Key=key)["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None


def check_file(file: dict[str, Any], *, filename: str, purpose: str, size: int) -> None:
    assert set(file) == FILE_KEYS, file
    assert file["id"].startswith("file-")
    assert file["object"] == "file"
    assert file["filename"] == filename
    assert file["purpose"] == purpose
    assert file["bytes"] == size
    assert file["status"] == "processed"
    assert file["status_details"] is None


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def authed(aws_api_key: dict[str, Any]) -> Callable[..., dict[str, Any]]:
    """Load an event file with the placeholder key (and optionally the placeholder file id) replaced."""

    def load(name: str, file_id: str | None = None) -> dict[str, Any]:
        event = kit.with_api_key(kit.load_event(name), aws_api_key["api_key"])
        if file_id is not None:
            event = kit.replace_strings(event, FILE_ID_PLACEHOLDER, file_id)
        return event

    return load


@pytest.fixture
def created(files_lambda: kit.LambdaUnderRie, authed) -> dict[str, Any]:
    """A file created by the `files-create.json` event."""
    status, file = invoke_json(files_lambda, authed("files-create.json"))
    assert status == 200, file
    return file


def event_file_content(name: str = "files-create.json") -> bytes:
    """The bytes of the `file` field of a multipart event file."""
    body, boundary = multipart_request_body(kit.load_event(name))
    for part in body.split(f"--{boundary}".encode()):
        head, _, rest = part.partition(b"\r\n\r\n")
        if b'name="file"' in head:
            return rest[: -len(b"\r\n")]
    raise AssertionError(f"{name} has no file field")


# --------------------------------------------------------------------------------------------
# What each event file must produce
# --------------------------------------------------------------------------------------------


def check_create(file: Any, moto: kit.MotoServer) -> None:
    check_file(file, filename="requests.jsonl", purpose="batch", size=len(event_file_content()))
    assert file["expires_at"] == file["created_at"] + 30 * 24 * 3600


def check_list(listing: Any, moto: kit.MotoServer) -> None:
    assert listing["object"] == "list"
    assert isinstance(listing["data"], list) and len(listing["data"]) <= 20
    assert isinstance(listing["has_more"], bool)
    assert all(set(f) == FILE_KEYS for f in listing["data"])
    created = [f["created_at"] for f in listing["data"]]
    assert created == sorted(created, reverse=True), "order=desc"


def check_upload(upload: Any, moto: kit.MotoServer) -> None:
    assert set(upload) == UPLOAD_KEYS, upload
    assert upload["id"].startswith("upload_")
    assert upload["object"] == "upload"
    assert upload["status"] == "pending"
    assert upload["file"] is None
    assert upload["purpose"] == "batch"
    assert upload["filename"] == "requests.jsonl"
    assert upload["bytes"] == len(event_file_content())
    assert upload["expires_at"] == upload["created_at"] + 3600


def check_bad_request(body: Any, moto: kit.MotoServer) -> None:
    error = body["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "file"
    assert error["message"] == "Invalid file format for Batch API. Must be .jsonl"


EXPECTED: dict[str, tuple[int, Callable[[Any, kit.MotoServer], None] | None]] = {
    "files-create.json": (200, check_create),
    "files-list.json": (200, check_list),
    "files-retrieve.json": (200, None),
    "files-content.json": (200, None),
    "files-delete.json": (200, None),
    "files-create-upload.json": (200, check_upload),
    "files-create-bad-request.json": (400, check_bad_request),
}


# --------------------------------------------------------------------------------------------
# The event files themselves (no processes needed)
# --------------------------------------------------------------------------------------------


def test_every_files_event_has_an_expectation() -> None:
    assert set(EVENT_NAMES) == set(EXPECTED), (
        f"missing event files: {sorted(set(EXPECTED) - set(EVENT_NAMES))}; "
        f"event files without expectations here: {sorted(set(EVENT_NAMES) - set(EXPECTED))}"
    )


@pytest.mark.parametrize("name", EVENT_NAMES)
def test_files_event_is_well_formed(name: str) -> None:
    event = kit.load_event(name)
    headers, context = kit.check_http_api_event(event)
    assert event["rawPath"].startswith("/v1/")
    assert (FILE_ID_PLACEHOLDER in event["rawPath"]) is (name in NEEDS_FILE_ID)
    method = context["http"]["method"]
    if method == "POST":
        content_type = headers["content-type"]
        if content_type.startswith("multipart/form-data"):
            assert event["isBase64Encoded"] is True, "API Gateway base64-encodes binary bodies"
            body, boundary = multipart_request_body(event)
            assert body.startswith(f"--{boundary}\r\n".encode())
            assert body.endswith(f"\r\n--{boundary}--\r\n".encode())
        else:
            assert content_type == "application/json"
            assert event["isBase64Encoded"] is False
            body = event["body"].encode()
            json.loads(body)
        assert headers["content-length"] == str(len(body))
    else:
        assert method in {"GET", "DELETE"}
        assert not event.get("body")
        assert event["isBase64Encoded"] is False
        assert "content-length" not in headers


# --------------------------------------------------------------------------------------------
# Each event under the RIE
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in EVENT_NAMES if n not in NEEDS_FILE_ID])
def test_files_event_under_the_rie(files_lambda: kit.LambdaUnderRie, moto: kit.MotoServer, authed, name: str) -> None:
    expected_status, check = EXPECTED[name]
    status, body = invoke_json(files_lambda, authed(name))
    assert status == expected_status, f"{name}: HTTP {status}: {body}"
    assert check is not None
    check(body, moto)


def test_retrieve_event(files_lambda: kit.LambdaUnderRie, authed, created: dict[str, Any]) -> None:
    status, file = invoke_json(files_lambda, authed("files-retrieve.json", created["id"]))
    assert status == 200, file
    assert file == created


def test_content_event(files_lambda: kit.LambdaUnderRie, authed, created: dict[str, Any]) -> None:
    status, headers, body = invoke(files_lambda, authed("files-content.json", created["id"]))
    assert status == 200, body[:300]
    assert body == event_file_content()
    assert headers.get("content-type") == "application/octet-stream"


def test_delete_event(files_lambda: kit.LambdaUnderRie, moto: kit.MotoServer, authed, created: dict[str, Any]) -> None:
    key = f"projects/{PROJECT}/files/{created['id']}"
    assert s3_object(moto, key) is not None
    status, deleted = invoke_json(files_lambda, authed("files-delete.json", created["id"]))
    assert status == 200, deleted
    assert deleted == {"id": created["id"], "object": "file", "deleted": True}
    assert s3_object(moto, key) is None, "the bytes outlived the file"
    for name in sorted(NEEDS_FILE_ID):
        status, body = invoke_json(files_lambda, authed(name, created["id"]))
        assert status == 404, f"{name} after delete: HTTP {status}: {body}"
        assert body["error"]["message"] == f"No such File object: {created['id']}"
        assert body["error"]["param"] == "id"


@pytest.mark.parametrize("name", EVENT_NAMES)
def test_placeholder_key_is_rejected(files_lambda: kit.LambdaUnderRie, name: str) -> None:
    status, body = invoke_json(files_lambda, kit.load_event(name))
    assert status == 401, f"{name}: HTTP {status}: {body}"
    assert body["error"]["code"] == "invalid_api_key", body


def test_missing_authorization_is_rejected(files_lambda: kit.LambdaUnderRie) -> None:
    status, body = invoke_json(files_lambda, kit.without_authorization(kit.load_event("files-list.json")))
    assert status == 401, body


# --------------------------------------------------------------------------------------------
# Storage in S3 (moto)
# --------------------------------------------------------------------------------------------


def test_created_file_is_in_the_bucket(moto: kit.MotoServer, created: dict[str, Any]) -> None:
    assert s3_object(moto, f"projects/{PROJECT}/files/{created['id']}") == event_file_content()


def test_listed_after_create(files_lambda: kit.LambdaUnderRie, authed, created: dict[str, Any]) -> None:
    status, listing = invoke_json(files_lambda, authed("files-list.json"))
    assert status == 200, listing
    assert listing["data"][0] == created, "the newest file comes first"
    assert listing["first_id"] == created["id"]


def test_list_limit_out_of_range(files_lambda: kit.LambdaUnderRie, authed) -> None:
    event = authed("files-list.json")
    for limit, code in (("0", "integer_below_min_value"), ("10001", "integer_above_max_value")):
        status, body = invoke_json(files_lambda, with_request(event, "GET", "/v1/files", query={"limit": limit}))
        assert status == 400, body
        assert body["error"]["code"] == code and body["error"]["param"] == "limit", body


def test_content_over_4_mb_redirects_to_a_presigned_s3_url(
    files_lambda: kit.LambdaUnderRie, moto: kit.MotoServer, authed
) -> None:
    # Bigger than the inline limit, yet small enough for one API Gateway request once base64-encoded.
    content = os.urandom(INLINE_LIMIT + 256 * 1024)
    status, file = invoke_json(files_lambda, create_event(authed("files-create.json"), "big.bin", content, "user_data"))
    assert status == 200, file
    check_file(file, filename="big.bin", purpose="user_data", size=len(content))
    assert hashlib.sha256(s3_object(moto, f"projects/{PROJECT}/files/{file['id']}") or b"").digest() == (
        hashlib.sha256(content).digest()
    )
    status, headers, body = invoke(files_lambda, authed("files-content.json", file["id"]))
    assert status == 307, f"HTTP {status}: {body[:300]!r}"
    location = headers.get("location", "")
    assert location.startswith(f"{moto.endpoint}/"), location
    assert urlsplit(location).path == f"/{moto.bucket}/projects/{PROJECT}/files/{file['id']}", location
    fetched = requests.get(location, timeout=60)
    assert fetched.status_code == 200, fetched.text[:300]
    assert fetched.content == content


def test_content_at_or_under_4_mb_is_inline(files_lambda: kit.LambdaUnderRie, authed) -> None:
    content = os.urandom(1024 * 1024)
    status, file = invoke_json(files_lambda, create_event(authed("files-create.json"), "inline.bin", content, "vision"))
    assert status == 200, file
    status, headers, body = invoke(files_lambda, authed("files-content.json", file["id"]))
    assert status == 200
    assert "location" not in headers
    assert body == content


def test_upload_in_parts(files_lambda: kit.LambdaUnderRie, moto: kit.MotoServer, authed) -> None:
    pieces = [b'{"custom_id":"a"}\n', b'{"custom_id":"b"}\n', b'{"custom_id":"c"}\n']
    base = authed("files-create-upload.json")
    create = with_request(
        base,
        "POST",
        "/v1/uploads",
        body=json.dumps(
            {
                "bytes": sum(map(len, pieces)),
                "filename": "parts.jsonl",
                "mime_type": "application/jsonl",
                "purpose": "batch",
            }
        ).encode(),
        content_type="application/json",
    )
    status, upload = invoke_json(files_lambda, create)
    assert status == 200, upload
    part_ids = []
    for piece in pieces:
        body, content_type = kit.multipart_body([("data", ("blob", piece, "application/octet-stream"))])
        event = with_request(base, "POST", f"/v1/uploads/{upload['id']}/parts", body=body, content_type=content_type)
        status, part = invoke_json(files_lambda, event)
        assert status == 200, part
        assert part["object"] == "upload.part" and part["upload_id"] == upload["id"]
        part_ids.append(part["id"])
    order = [1, 2, 0]
    complete = with_request(
        base,
        "POST",
        f"/v1/uploads/{upload['id']}/complete",
        body=json.dumps({"part_ids": [part_ids[i] for i in order]}).encode(),
        content_type="application/json",
    )
    status, completed = invoke_json(files_lambda, complete)
    assert status == 200, completed
    assert completed["status"] == "completed"
    file = completed["file"]
    check_file(file, filename="parts.jsonl", purpose="batch", size=sum(map(len, pieces)))
    assert s3_object(moto, f"projects/{PROJECT}/files/{file['id']}") == b"".join(pieces[i] for i in order)
    prefix = f"uploads/{PROJECT}/{upload['id']}/"
    leftovers = moto.client("s3").list_objects_v2(Bucket=moto.bucket, Prefix=prefix)
    assert leftovers.get("KeyCount", 0) == 0, "parts were kept after completion"


def test_direct_upload_to_a_presigned_s3_url(files_lambda: kit.LambdaUnderRie, moto: kit.MotoServer, authed) -> None:
    content = os.urandom(300_000)
    base = authed("files-create-upload.json")
    create = with_request(
        base,
        "POST",
        "/v1/direct_uploads",
        body=json.dumps(
            {
                "filename": "direct.bin",
                "purpose": "user_data",
                "bytes": len(content),
                "sha256": hashlib.sha256(content).hexdigest(),
            }
        ).encode(),
        content_type="application/json",
    )
    status, target = invoke_json(files_lambda, create)
    assert status == 200, target
    assert target["object"] == "direct_upload" and target["method"] == "PUT"
    assert target["file"]["status"] == "uploaded"
    assert target["upload_url"].startswith(f"{moto.endpoint}/"), target["upload_url"]
    checksum = base64.b64encode(hashlib.sha256(content).digest()).decode()
    assert target["upload_headers"] == {"if-none-match": "*", "x-amz-checksum-sha256": checksum}, target
    file_id = target["file"]["id"]
    put = requests.put(target["upload_url"], data=content, headers=target["upload_headers"], timeout=60)
    assert put.status_code == 200, put.text[:300]
    again = requests.put(target["upload_url"], data=content, headers=target["upload_headers"], timeout=60)
    assert again.status_code == 412, "the URL stores the bytes once"
    # Nor can the API's own upload route replace them (it is the local server's path only).
    through_api = with_request(
        base, "PUT", f"/v1/files/{file_id}/content", body=b"x" * len(content), content_type="application/octet-stream"
    )
    status, refused = invoke_json(files_lambda, through_api)
    assert status == 400 and refused["error"]["param"] == "id", refused
    status, file = invoke_json(files_lambda, authed("files-retrieve.json", file_id))
    assert status == 200, file
    assert file["status"] == "processed", file
    assert file["bytes"] == len(content)
    status, _, body = invoke(files_lambda, authed("files-content.json", file_id))
    assert status == 200 and body == content


def test_direct_upload_of_the_wrong_size_is_an_error(files_lambda: kit.LambdaUnderRie, authed) -> None:
    base = authed("files-create-upload.json")
    create = with_request(
        base,
        "POST",
        "/v1/direct_uploads",
        body=json.dumps({"filename": "short.bin", "purpose": "user_data", "bytes": 100}).encode(),
        content_type="application/json",
    )
    status, target = invoke_json(files_lambda, create)
    assert status == 200, target
    assert requests.put(target["upload_url"], data=b"only 12 byte", timeout=60).status_code == 200
    status, file = invoke_json(files_lambda, authed("files-retrieve.json", target["file"]["id"]))
    assert status == 200, file
    assert file["status"] == "error"
    assert file["status_details"]


def test_other_project_gets_404(
    files_lambda: kit.LambdaUnderRie, aws_cli: kit.NimbusCli, created: dict[str, Any]
) -> None:
    other = aws_cli.create_key("other", name="files-other-project")["api_key"]
    for name in sorted(NEEDS_FILE_ID):
        event = kit.replace_strings(kit.with_api_key(kit.load_event(name), other), FILE_ID_PLACEHOLDER, created["id"])
        status, body = invoke_json(files_lambda, event)
        assert status == 404, f"{name}: HTTP {status}: {body}"
        assert body["error"]["message"] == f"No such File object: {created['id']}"
    event = kit.with_api_key(kit.load_event("files-list.json"), other)
    status, listing = invoke_json(files_lambda, event)
    assert status == 200 and created["id"] not in {f["id"] for f in listing["data"]}


# --------------------------------------------------------------------------------------------
# The OpenAI SDK against the function (through a loopback stand-in for API Gateway)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lambda_sdk(files_lambda: kit.LambdaUnderRie, aws_api_key: dict[str, Any]):
    relay = kit.ApiGatewayRelay(files_lambda)
    sdk = kit.make_client(relay.api_base, api_key=aws_api_key["api_key"], timeout=60.0)
    try:
        yield sdk
    finally:
        sdk.close()
        relay.stop()


def test_sdk_file_lifecycle_through_the_function(lambda_sdk, moto: kit.MotoServer) -> None:
    content = b'{"custom_id":"sdk"}\n'
    file = lambda_sdk.files.create(file=("sdk.jsonl", content), purpose="batch")
    assert file.status == "processed" and file.bytes == len(content)
    assert lambda_sdk.files.retrieve(file.id) == file
    assert file.id in {f.id for f in lambda_sdk.files.list(limit=2)}
    assert lambda_sdk.files.content(file.id).read() == content
    assert s3_object(moto, f"projects/{PROJECT}/files/{file.id}") == content
    assert lambda_sdk.files.delete(file.id).deleted is True
    assert s3_object(moto, f"projects/{PROJECT}/files/{file.id}") is None


def test_sdk_follows_the_redirect_for_large_content(lambda_sdk) -> None:
    content = os.urandom(INLINE_LIMIT + 100_000)
    file = lambda_sdk.files.create(file=("large.bin", content), purpose="user_data")
    raw = lambda_sdk.files.with_raw_response.content(file.id)
    assert raw.http_response.status_code == 200
    assert [r.status_code for r in raw.http_response.history] == [307], "served through the presigned redirect"
    assert raw.http_response.content == content
    assert lambda_sdk.files.content(file.id).read() == content
    with lambda_sdk.files.with_streaming_response.content(file.id) as streamed:
        assert kit.sha256_of_chunks(streamed.iter_bytes()) == (hashlib.sha256(content).hexdigest(), len(content))
    lambda_sdk.files.delete(file.id)


def test_sdk_upload_file_chunked_through_the_function(lambda_sdk, tmp_path) -> None:
    path = tmp_path / "chunked.bin"
    sha256, md5 = kit.write_random_file(path, 5 * 1024 * 1024 + 123)
    upload = lambda_sdk.uploads.upload_file_chunked(
        file=path, mime_type="application/octet-stream", purpose="assistants", part_size=1024 * 1024, md5=md5
    )
    assert upload.status == "completed"
    assert upload.file.bytes == path.stat().st_size
    with lambda_sdk.files.with_streaming_response.content(upload.file.id) as streamed:
        assert kit.sha256_of_chunks(streamed.iter_bytes())[0] == sha256
    lambda_sdk.files.delete(upload.file.id)
