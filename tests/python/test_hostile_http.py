"""Hostile input at the HTTP surface of `nimbus serve` (issue #8): poisoned `Host` headers,
oversized values echoed in errors, framework rejections that were plain text, and early rejections
that used to drop keep-alive connections. Raw `http.client`/sockets where the bytes on the wire
matter; the real OpenAI SDK where a client is involved."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Callable
from typing import Any

import openai
import pytest

import nimbus_testkit as kit

MIB = 1024 * 1024
SMALL_ANSWER = 4096


def connect(server: kit.NimbusServer) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)


def exchange(
    conn: http.client.HTTPConnection,
    method: str,
    path: str,
    *,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    host: str | None = None,
) -> tuple[http.client.HTTPResponse, bytes]:
    """One request on `conn` (kept alive); `host` replaces the Host header verbatim."""
    conn.putrequest(method, path, skip_host=host is not None, skip_accept_encoding=True)
    if host is not None:
        conn.putheader("Host", host)
    for name, value in (headers or {}).items():
        conn.putheader(name, value)
    if body is not None:
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    response = conn.getresponse()
    return response, response.read()


def envelope(response: http.client.HTTPResponse, data: bytes) -> dict[str, Any]:
    assert response.getheader("content-type") == "application/json", (response.status, data[:300])
    body = json.loads(data)
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) >= {"message", "type", "param", "code"}, error
    return error


# --------------------------------------------------------------------------------------------
# A1: Host header poisoning
# --------------------------------------------------------------------------------------------

DIRECT_UPLOAD = json.dumps({"filename": "a.jsonl", "purpose": "batch", "bytes": 10}).encode()


@pytest.mark.parametrize(
    "host", ["evil.example:443/steal?x=", "user@evil.example", "evil.example:99999", "evil.example, other.example"]
)
def test_poisoned_host_is_refused(nimbus_server: kit.NimbusServer, host: str) -> None:
    conn = connect(nimbus_server)
    try:
        response, data = exchange(
            conn, "POST", "/v1/direct_uploads", body=DIRECT_UPLOAD, headers={"Content-Type": "application/json"}, host=host
        )
    finally:
        conn.close()
    assert response.status == 400, data
    error = envelope(response, data)
    assert error["param"] == "Host", error
    assert b"evil" not in data


def test_upload_url_comes_from_the_bound_address_not_the_host_header(nimbus_server: kit.NimbusServer) -> None:
    conn = connect(nimbus_server)
    try:
        response, data = exchange(
            conn,
            "POST",
            "/v1/direct_uploads",
            body=DIRECT_UPLOAD,
            headers={"Content-Type": "application/json"},
            host="other.example:8443",
        )
    finally:
        conn.close()
    assert response.status == 200, data
    target = json.loads(data)
    assert target["upload_url"] == f"{nimbus_server.base_url}/v1/files/{target['file']['id']}/content"


def test_upload_url_uses_the_configured_public_url(server_factory: Callable[..., kit.NimbusServer]) -> None:
    server = server_factory("nimbus-public-url", extra_env={"NIMBUS_PUBLIC_URL": "https://nimbus.example.com/base/"})
    client = kit.make_client(server.api_base)
    try:
        response = client.post(
            "/direct_uploads", body={"filename": "a.txt", "purpose": "user_data", "bytes": 3}, cast_to=object
        )
    finally:
        client.close()
    assert response["upload_url"] == f"https://nimbus.example.com/base/v1/files/{response['file']['id']}/content"


# --------------------------------------------------------------------------------------------
# A3: oversized values are quoted as a short prefix
# --------------------------------------------------------------------------------------------

HUGE = "v" * MIB


def chat_body(**extra: Any) -> dict[str, Any]:
    return {"model": "dummy", "messages": kit.user("hi"), **extra}


def batch_body(**extra: Any) -> dict[str, Any]:
    return {"input_file_id": "file-x", "endpoint": "/v1/chat/completions", "completion_window": "24h", **extra}


OVERSIZED = [
    ("/v1/chat/completions", chat_body(model=HUGE), "model"),
    (
        "/v1/chat/completions",
        chat_body(
            tools=[{"type": "function", "function": {"name": "f"}}],
            tool_choice={"type": "function", "function": {"name": HUGE}},
        ),
        "tool_choice",
    ),
    ("/v1/batches", batch_body(completion_window=HUGE), "completion_window"),
    ("/v1/batches", batch_body(endpoint=HUGE), "endpoint"),
    ("/v1/batches", batch_body(input_file_id=HUGE), "input_file_id"),
    ("/v1/batches", batch_body(metadata={HUGE: "v"}), "metadata"),
    ("/v1/uploads", {"filename": "a", "purpose": HUGE, "bytes": 1, "mime_type": "text/plain"}, "purpose"),
]


@pytest.mark.parametrize(("path", "body", "param"), OVERSIZED, ids=[f"{p}:{param}" for p, _, param in OVERSIZED])
def test_oversized_json_values_get_a_small_error(
    nimbus_server: kit.NimbusServer, path: str, body: dict[str, Any], param: str
) -> None:
    conn = connect(nimbus_server)
    try:
        response, data = exchange(
            conn, "POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
    finally:
        conn.close()
    assert response.status in (400, 404), data[:300]
    assert len(data) < SMALL_ANSWER, len(data)
    assert envelope(response, data)["param"] == param


def test_oversized_model_through_the_sdk(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(model=HUGE, messages=kit.user("hi"))
    assert len(raised.value.message) < SMALL_ANSWER
    assert raised.value.body["param"] == "model"


@pytest.mark.parametrize("field", ["purpose", "expires_after[seconds]", "unknown_field"])
def test_oversized_multipart_text_field_gets_a_small_400(nimbus_server: kit.NimbusServer, field: str) -> None:
    body, content_type = kit.multipart_body(
        [(field, "p" * (7 * MIB)), ("file", ("a.jsonl", b"{}\n", "application/jsonl"))]
    )
    conn = connect(nimbus_server)
    try:
        response, data = exchange(conn, "POST", "/v1/files", body=body, headers={"Content-Type": content_type})
    finally:
        conn.close()
    assert response.status == 400, data[:300]
    assert len(data) < SMALL_ANSWER, len(data)
    error = envelope(response, data)
    assert error["param"] == field, error


# --------------------------------------------------------------------------------------------
# A4: every error is the envelope
# --------------------------------------------------------------------------------------------

ROUTES_WITH_IDS = [
    ("GET", "/v1/files/{id}", "id"),
    ("DELETE", "/v1/files/{id}", "id"),
    ("GET", "/v1/files/{id}/content", "id"),
    ("PUT", "/v1/files/{id}/content", "id"),
    ("GET", "/v1/batches/{id}", "id"),
    ("POST", "/v1/batches/{id}/cancel", "id"),
    ("POST", "/v1/uploads/{id}/parts", "id"),
    ("POST", "/v1/uploads/{id}/complete", "id"),
    ("POST", "/v1/uploads/{id}/cancel", "id"),
    ("GET", "/v1/models/{id}", "model"),
]


def test_ids_that_are_not_utf8_get_the_envelope(nimbus_server: kit.NimbusServer) -> None:
    conn = connect(nimbus_server)
    try:
        for method, route, param in ROUTES_WITH_IDS:
            path = route.replace("{id}", "%FF%FE%FD")
            response, data = exchange(conn, method, path, body=b"{}", headers={"Content-Type": "application/json"})
            assert response.status == 400, (method, path, data)
            error = envelope(response, data)
            assert error["param"] == param, (method, path, error)
            assert "UTF-8" in error["message"], error
    finally:
        conn.close()


@pytest.mark.parametrize("path", ["/v1/files", "/v1/batches"])
@pytest.mark.parametrize("query", ["limit=1&limit=2", "after=x&after=y"])
def test_repeated_query_parameters_get_the_envelope(nimbus_server: kit.NimbusServer, path: str, query: str) -> None:
    conn = connect(nimbus_server)
    try:
        response, data = exchange(conn, "GET", f"{path}?{query}")
    finally:
        conn.close()
    assert response.status == 400, data
    error = envelope(response, data)
    assert error["param"] == query.split("=")[0], error
    assert "Duplicate" in error["message"], error


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/v1/nope", 404), ("PATCH", "/v1/files", 405), ("GET", "/v1/chat/completions", 405)],
)
def test_fallbacks_keep_the_envelope(nimbus_server: kit.NimbusServer, method: str, path: str, status: int) -> None:
    conn = connect(nimbus_server)
    try:
        response, data = exchange(conn, method, path)
    finally:
        conn.close()
    assert response.status == status, data
    envelope(response, data)


# --------------------------------------------------------------------------------------------
# A5: early rejections keep keep-alive clients working
# --------------------------------------------------------------------------------------------


def then_a_normal_request_works(conn: http.client.HTTPConnection, headers: dict[str, str] | None = None) -> None:
    """The next request on the same `HTTPConnection`: on the same socket unless the previous
    answer said `Connection: close` (http.client then reconnects by itself)."""
    response, data = exchange(conn, "GET", "/v1/models", headers=headers)
    assert response.status == 200, data


def rejected_then_reused(
    server: kit.NimbusServer,
    method: str,
    path: str,
    body: bytes,
    *,
    status: int,
    headers: dict[str, str] | None = None,
    next_headers: dict[str, str] | None = None,
) -> http.client.HTTPResponse:
    conn = connect(server)
    try:
        response, data = exchange(conn, method, path, body=body, headers=headers)
        assert response.status == status, data[:300]
        envelope(response, data)
        then_a_normal_request_works(conn, next_headers)
        then_a_normal_request_works(conn, next_headers)
        return response
    finally:
        conn.close()


def test_401_with_a_body_keeps_the_connection(keyed_server: tuple[kit.NimbusServer, dict[str, Any]]) -> None:
    server, created = keyed_server
    body = json.dumps(chat_body(padding="x" * 200_000)).encode()
    good = {"Authorization": f"Bearer {created['api_key']}"}
    for headers in ({}, {"Authorization": "Bearer nmb_wrong_key"}):
        response = rejected_then_reused(
            server, "POST", "/v1/chat/completions", body, status=401, headers=headers, next_headers=good
        )
        assert response.getheader("connection") is None


def test_404_and_405_with_a_body_keep_the_connection(nimbus_server: kit.NimbusServer) -> None:
    body = b"x" * 300_000
    rejected_then_reused(nimbus_server, "POST", "/v1/nope", body, status=404)
    rejected_then_reused(nimbus_server, "PATCH", "/v1/files", body, status=405)


def test_wrong_content_type_on_files_keeps_the_connection(nimbus_server: kit.NimbusServer) -> None:
    body = json.dumps({"purpose": "batch", "padding": "x" * 500_000}).encode()
    rejected_then_reused(
        nimbus_server, "POST", "/v1/files", body, status=400, headers={"Content-Type": "application/json"}
    )


def test_413_keeps_the_connection(nimbus_server: kit.NimbusServer) -> None:
    # Just over the 10 MB JSON limit: the rest is drained.
    body = b'{"model": "dummy", "padding": "' + b"x" * (10 * MIB + 200_000) + b'"}'
    rejected_then_reused(
        nimbus_server, "POST", "/v1/chat/completions", body, status=413, headers={"Content-Type": "application/json"}
    )


def test_early_rejection_of_a_large_body_says_connection_close(nimbus_server: kit.NimbusServer) -> None:
    """7 MB left unread after a 400: too much to drain, so the answer says `Connection: close`,
    and the rest is still read so the client can finish sending and read the answer."""
    body, content_type = kit.multipart_body(
        [("purpose", "nonsense"), ("file", ("a.jsonl", b"x" * (7 * MIB), "application/jsonl"))]
    )
    response = rejected_then_reused(
        nimbus_server, "POST", "/v1/files", body, status=400, headers={"Content-Type": content_type}
    )
    assert response.getheader("connection") == "close"


def test_rejection_before_a_large_body_is_sent_says_connection_close(
    keyed_server: tuple[kit.NimbusServer, dict[str, Any]],
) -> None:
    """A 401 answered while the client has sent only headers of a 50 MB upload."""
    server, _ = keyed_server
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(
            b"POST /v1/files HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
            b"Content-Length: 52428800\r\n\r\n"
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {head!r}"
            head += chunk
    status_line, *header_lines = head.split(b"\r\n\r\n")[0].decode().split("\r\n")
    assert status_line.startswith("HTTP/1.1 401"), status_line
    headers = {name.lower(): value.strip() for name, value in (line.split(":", 1) for line in header_lines)}
    assert headers.get("connection") == "close", headers


def test_sdk_rejected_upload_then_a_normal_call(nimbus_server: kit.NimbusServer, tmp_path: Any) -> None:
    """The OpenAI SDK (httpx, keep-alive): a rejected upload, then calls on the same client."""
    client = kit.make_client(nimbus_server.api_base)
    try:
        for size in (300_000, 3 * MIB):
            with pytest.raises(openai.BadRequestError) as raised:
                client.files.create(file=("a.jsonl", b"x" * size), purpose="nonsense")  # type: ignore[arg-type]
            assert raised.value.body["param"] == "purpose"
            assert client.models.list().data
            assert client.models.list().data
    finally:
        client.close()


# --------------------------------------------------------------------------------------------
# C8 (issue #26): stalled bodies neither hold the large-body budget nor hang forever
# --------------------------------------------------------------------------------------------

STALL_IDLE_SECS = 2


def stall(server: kit.NimbusServer, path: str) -> socket.socket:
    """Declare a 9 MB JSON body, send 17 bytes of it, stop."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Type: application/json\r\n"
        "Content-Length: 9437184\r\n\r\n".encode()
    )
    sock.sendall(b'{"model": "dummy"')
    return sock


def test_stalled_bodies_time_out_and_do_not_block_large_requests(
    server_factory: Callable[..., kit.NimbusServer],
) -> None:
    server = server_factory("nimbus-stalled-bodies", extra_env={"NIMBUS_BODY_IDLE_TIMEOUT_SECS": str(STALL_IDLE_SECS)})
    started = time.monotonic()
    stalled = [stall(server, "/batch_inference"), stall(server, "/v1/chat/completions")]
    time.sleep(0.3)
    for size in (621 * 1024, 300 * 1024):
        conn = connect(server)
        body = json.dumps(chat_body(messages=[{"role": "user", "content": "x" * size}])).encode()
        sent = time.monotonic()
        response, data = exchange(
            conn, "POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"}
        )
        assert response.status == 200, data[:300]
        assert time.monotonic() - sent < STALL_IDLE_SECS / 2, f"a {size}-byte request waited behind stalled bodies"
        conn.close()
    for sock in stalled:
        sock.settimeout(STALL_IDLE_SECS + 5)
        answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"Request timeout" in answer  # the envelope of the route (TensorZero shape on /batch_inference)
        sock.close()
    took = time.monotonic() - started
    assert STALL_IDLE_SECS <= took < STALL_IDLE_SECS + 4, took
