"""A scripted stand-in for a provider's Files and Batches API (just enough of OpenAI's), on a loopback
port in a thread, for the provider-native batch cases a real upstream Nimbus cannot play.

The first path segment picks the script, so one fake serves several providers of one config:
- `/reject/v1/…`: every `POST /files` is refused with HTTP 400 and `REJECT_MESSAGE`.
- `/vanish/v1/…`: uploads and batch creation succeed, but the created batch is never found again:
  `GET /batches/{id}` and `POST /batches/{id}/cancel` answer 404.
Both list no files and no batches on `GET /files` and `GET /batches` (nothing to reconcile with).
Every request is recorded (`requests`), multipart uploads with their file name and content.

`RecordingRelay` sits in front of a real provider (the upstream Nimbus) and keeps every exchange,
so a test still sees what was uploaded and downloaded after the provider's copies are deleted.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests

REJECT_MESSAGE = "mock provider: this file is not a valid batch input"
VANISHED_MESSAGE = "mock provider: no such batch"
SCRIPTS = ("reject", "vanish")


@dataclass
class FakeRequest:
    method: str
    script: str
    path: str  # after `/<script>/v1`, e.g. `/files` or `/batches/batch_x`
    json_body: Any = None
    upload_filename: str | None = None
    upload_content: bytes | None = None
    form: dict[str, str] = field(default_factory=dict)


def _parse_multipart(content_type: str, raw: bytes) -> tuple[dict[str, str], str | None, bytes | None]:
    message = BytesParser(policy=HTTP).parsebytes(f"content-type: {content_type}\r\n\r\n".encode() + raw)
    fields: dict[str, str] = {}
    filename, content = None, None
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        if part.get_filename() is not None:
            filename, content = part.get_filename(), payload
        elif name:
            fields[str(name)] = payload.decode()
    return fields, filename, content


class _Handler(BaseHTTPRequestHandler):
    """Quiet HTTP/1.1 handling of GET, POST and DELETE by one method, `answer(method, raw body)`."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep pytest output clean
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.answer(method, self.rfile.read(length) if length else b"")

    def answer(self, method: str, raw: bytes) -> None:
        raise NotImplementedError

    def send_bytes(self, status: int, content_type: str, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def _serve(handler: type[BaseHTTPRequestHandler], name: str) -> tuple[ThreadingHTTPServer, threading.Thread]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    return server, thread


class FakeBatchUpstream:
    def __init__(self) -> None:
        self.requests: list[FakeRequest] = []
        self._lock = threading.Lock()
        self._counter = 0
        fake = self

        class Handler(_Handler):
            def answer(self, method: str, raw: bytes) -> None:
                match = re.fullmatch(r"/([a-z]+)/v1(/[^?]*)(\?.*)?", self.path)
                if match is None or match.group(1) not in SCRIPTS:
                    self._send(404, _error_body(f"mock provider: unknown path {self.path}", None))
                    return
                request = FakeRequest(method, match.group(1), match.group(2))
                content_type = self.headers.get("content-type") or ""
                if content_type.startswith("multipart/form-data"):
                    request.form, request.upload_filename, request.upload_content = _parse_multipart(content_type, raw)
                elif raw:
                    request.json_body = json.loads(raw)
                with fake._lock:
                    fake.requests.append(request)
                self._send(*fake._answer(request))

            def _send(self, status: int, body: dict[str, Any]) -> None:
                self.send_bytes(status, "application/json", json.dumps(body).encode())

        self.server, self.thread = _serve(Handler, "fake-batch-upstream")

    def _next_id(self, prefix: str) -> str:
        with self._lock:
            self._counter += 1
            return f"{prefix}-fake-{self._counter:06d}"

    def _answer(self, request: FakeRequest) -> tuple[int, dict[str, Any]]:
        method, path = request.method, request.path
        if method == "GET" and path in ("/files", "/batches"):
            return 200, {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}
        if method == "POST" and path == "/files":
            if request.script == "reject":
                return 400, _error_body(REJECT_MESSAGE, "invalid_file")
            file_id = self._next_id("file")
            return 200, {
                "id": file_id,
                "object": "file",
                "bytes": len(request.upload_content or b""),
                "created_at": int(time.time()),
                "filename": request.upload_filename,
                "purpose": request.form.get("purpose", "batch"),
            }
        if method == "POST" and path == "/batches":
            return 200, self._new_batch(request.json_body or {})
        if path.startswith("/batches/") or path.startswith("/files/"):
            return 404, _error_body(VANISHED_MESSAGE, "not_found")
        return 404, _error_body(f"mock provider: no route {method} {path}", None)

    def _new_batch(self, body: dict[str, Any]) -> dict[str, Any]:
        now = int(time.time())
        return {
            "id": self._next_id("batch"),
            "object": "batch",
            "endpoint": body.get("endpoint"),
            "errors": None,
            "input_file_id": body.get("input_file_id"),
            "completion_window": body.get("completion_window", "24h"),
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": now,
            "in_progress_at": None,
            "expires_at": now + 86_400,
            "finalizing_at": None,
            "completed_at": None,
            "failed_at": None,
            "expired_at": None,
            "cancelling_at": None,
            "cancelled_at": None,
            "request_counts": {"total": 0, "completed": 0, "failed": 0},
            "metadata": body.get("metadata"),
        }

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def api_base(self, script: str) -> str:
        """The `api_base` of a provider played by `script` (one of `SCRIPTS`)."""
        assert script in SCRIPTS, script
        return f"{self.base_url}/{script}/v1"

    def seen(self, method: str, path_prefix: str, *, script: str | None = None) -> list[FakeRequest]:
        """The requests with this method whose path starts with `path_prefix`, oldest first."""
        with self._lock:
            return [
                r
                for r in self.requests
                if r.method == method and r.path.startswith(path_prefix) and (script is None or r.script == script)
            ]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _error_body(message: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}


@dataclass
class RelayedExchange:
    method: str
    path: str  # as sent, with the query
    request_body: bytes
    request_content_type: str
    status: int
    response_body: bytes

    def response_json(self) -> Any:
        return json.loads(self.response_body)


class RecordingRelay:
    """A loopback HTTP relay in front of `target` (a base URL) that forwards every request as it
    is (method, path, body, the headers that matter) and keeps each exchange, so a test can see what
    a provider was sent and answered even after the files are deleted there."""

    FORWARDED_HEADERS = ("authorization", "content-type", "idempotency-key", "accept")

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.exchanges: list[RelayedExchange] = []
        self._lock = threading.Lock()
        relay = self

        class Handler(_Handler):
            def answer(self, method: str, raw: bytes) -> None:
                headers = {k: v for k, v in self.headers.items() if k.lower() in RecordingRelay.FORWARDED_HEADERS}
                answer = requests.request(method, relay.target + self.path, data=raw, headers=headers, timeout=60)
                exchange = RelayedExchange(
                    method, self.path, raw, self.headers.get("content-type") or "", answer.status_code, answer.content
                )
                with relay._lock:
                    relay.exchanges.append(exchange)
                self.send_bytes(answer.status_code, answer.headers.get("content-type", "application/json"), answer.content)

        self.server, self.thread = _serve(Handler, "recording-relay")

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def seen(self, method: str, path_prefix: str) -> list[RelayedExchange]:
        """The exchanges with this method whose path starts with `path_prefix` (e.g. `/v1/files`)."""
        with self._lock:
            return [e for e in self.exchanges if e.method == method and e.path.startswith(path_prefix)]

    def uploads(self) -> list[tuple[dict[str, str], str, bytes, RelayedExchange]]:
        """Each successful `POST /files`: (form fields, file name, content, exchange)."""
        found = []
        for exchange in self.seen("POST", "/v1/files"):
            if exchange.status == 200 and exchange.request_content_type.startswith("multipart/form-data"):
                fields, filename, content = _parse_multipart(exchange.request_content_type, exchange.request_body)
                found.append((fields, filename or "", content or b"", exchange))
        return found

    def uploaded(self, filename: str) -> tuple[str, list[dict[str, Any]], dict[str, str]]:
        """The one file uploaded under `filename`: (its id at the provider, its JSONL lines, form fields)."""
        matches = [u for u in self.uploads() if u[1] == filename]
        assert len(matches) == 1, f"{len(matches)} uploads named {filename}: {[u[1] for u in self.uploads()]}"
        fields, _, content, exchange = matches[0]
        lines = [json.loads(line) for line in content.decode().splitlines() if line.strip()]
        return exchange.response_json()["id"], lines, fields

    def downloaded(self, file_id: str) -> list[dict[str, Any]]:
        """The JSONL lines of the last successful `GET /files/{file_id}/content`."""
        found = [e for e in self.seen("GET", f"/v1/files/{file_id}/content") if e.status == 200]
        assert found, f"file {file_id} was never downloaded through the relay"
        return [json.loads(line) for line in found[-1].response_body.decode().splitlines() if line.strip()]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
