"""A counting HTTP proxy in front of moto: every AWS request the Lambda binaries make goes through
it and is recorded by phase, function, service and operation, with DynamoDB capacity units."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import math
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "expect", "te", "upgrade"}


def av_size(value: dict[str, Any]) -> int:
    """Size of one DynamoDB attribute value as DynamoDB counts it (close enough for pricing)."""
    ((kind, x),) = value.items()
    if kind == "S":
        return len(x.encode())
    if kind == "N":
        digits = x.lstrip("-").replace(".", "").lstrip("0") or "0"
        return (len(digits) + 1) // 2 + 1
    if kind == "B":
        return len(base64.b64decode(x))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode()) for s in x)
    if kind == "NS":
        return sum(av_size({"N": n}) for n in x)
    if kind == "M":
        return 3 + sum(len(k.encode()) + av_size(v) + 1 for k, v in x.items())
    if kind == "L":
        return 3 + sum(av_size(v) + 1 for v in x)
    return len(json.dumps(x))


def item_size(item: dict[str, Any] | None) -> int:
    return sum(len(k.encode()) + av_size(v) for k, v in (item or {}).items())


def in_gsi(item: dict[str, Any] | None) -> bool:
    return bool(item) and "owner_key" in item and "sort_key" in item


def dynamodb_units(operation: str, request: dict[str, Any], response: dict[str, Any]) -> tuple[float, float, int]:
    """(write request units, read request units, items) of one DynamoDB call, on demand: writes
    1 unit per KB (2 in a transaction) plus the same again for the `by_owner` GSI entry (every
    Nimbus item has one, projection ALL); strongly consistent reads 1 unit per 4 KB, eventually
    consistent (GSI queries) half that."""
    if operation == "PutItem":
        item = request.get("Item")
        units = max(1, math.ceil(item_size(item) / 1024))
        return units * (2 if in_gsi(item) else 1), 0.0, 1
    if operation == "DeleteItem":
        old = response.get("Attributes")
        units = max(1, math.ceil(item_size(old) / 1024))
        return units * (2 if in_gsi(old) else 1), 0.0, 1
    if operation == "TransactWriteItems":
        wru = 0.0
        items = request.get("TransactItems", [])
        for entry in items:
            put = entry.get("Put") or {}
            item = put.get("Item")
            units = max(1, math.ceil(item_size(item) / 1024))
            wru += 2 * units + (units if in_gsi(item) else 0)
        return wru, 0.0, len(items)
    if operation == "GetItem":
        units = max(1, math.ceil(item_size(response.get("Item")) / 4096))
        return 0.0, units * (1.0 if request.get("ConsistentRead") else 0.5), 1
    if operation == "Query":
        total = sum(item_size(i) for i in response.get("Items", []))
        units = max(1, math.ceil(total / 4096))
        return 0.0, units * (1.0 if request.get("ConsistentRead") else 0.5), len(response.get("Items", []))
    return 0.0, 0.0, 0


def s3_operation(method: str, key: str, query: dict[str, list[str]], headers: dict[str, str]) -> str:
    if not key:
        if method == "GET":
            if "uploads" in query:
                return "ListMultipartUploads"
            return "ListObjectsV2" if query.get("list-type") == ["2"] else "ListObjects"
        if method == "POST" and "delete" in query:
            return "DeleteObjects"
        return {"HEAD": "HeadBucket", "PUT": "CreateBucket", "DELETE": "DeleteBucket"}.get(method, f"{method} bucket")
    copy = "x-amz-copy-source" in headers
    if method == "GET":
        return "ListParts" if "uploadId" in query else "GetObject"
    if method == "HEAD":
        return "HeadObject"
    if method == "PUT":
        if "partNumber" in query:
            return "UploadPartCopy" if copy else "UploadPart"
        return "CopyObject" if copy else "PutObject"
    if method == "POST":
        if "uploads" in query:
            return "CreateMultipartUpload"
        if "uploadId" in query:
            return "CompleteMultipartUpload"
    if method == "DELETE":
        return "AbortMultipartUpload" if "uploadId" in query else "DeleteObject"
    return f"{method} object"


class CountingProxy:
    """A threaded HTTP proxy on 127.0.0.1 in front of moto: forwards every request and records
    (phase, function, service, operation, units, bytes). The function is told apart by the access
    key it signs with (each function gets its own fake key).

    With `serialize`, requests reach moto one at a time: moto is not safe under concurrent writes
    (its `TransactWriteItems` deep-copies the whole table for rollback while other threads add
    items, and answers 500 when that copy races a `PutItem`), which a batch writing one record per
    item hits. The counts do not change; the timings do (each request waits for the previous)."""

    def __init__(self, upstream_port: int, functions_by_key: dict[str, str], *, serialize: bool = False):
        self.upstream_port = upstream_port
        self.upstream_lock = threading.Lock() if serialize else contextlib.nullcontext()
        self.functions_by_key = functions_by_key
        self.entries: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.phase = "setup"
        proxy = self
        local = threading.local()

        def upstream() -> http.client.HTTPConnection:
            if getattr(local, "conn", None) is None:
                local.conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=300)
            return local.conn

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def _body(self) -> bytes:
                if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
                    raw = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return bytes(raw)
                        raw += self.rfile.read(size)
                        self.rfile.readline()
                length = int(self.headers.get("content-length") or 0)
                return self.rfile.read(length) if length else b""

            def _forward(self) -> None:
                phase = proxy.phase
                body = self._body()
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
                headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
                if body or self.command in ("PUT", "POST"):
                    headers["Content-Length"] = str(len(body))
                for attempt in range(2):
                    conn = upstream()
                    try:
                        with proxy.upstream_lock:
                            conn.request(self.command, self.path, body=body, headers=headers)
                            response = conn.getresponse()
                            payload = response.read()
                        break
                    except (http.client.HTTPException, OSError):
                        conn.close()
                        local.conn = None
                        if attempt:
                            raise
                self.send_response_only(response.status, response.reason)
                for name, value in response.getheaders():
                    if name.lower() in HOP_HEADERS or name.lower() == "content-length":
                        continue
                    self.send_header(name, value)
                if self.command == "HEAD":
                    self.send_header("Content-Length", response.getheader("content-length") or "0")
                else:
                    self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)
                proxy.record(phase, self.command, self.path, dict(self.headers.items()), body, response.status, payload)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="counting-proxy", daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def function_of(self, headers: dict[str, str], query: dict[str, list[str]]) -> str:
        auth = {k.lower(): v for k, v in headers.items()}.get("authorization", "")
        match = re.search(r"Credential=([^/]+)/", auth)
        key = match.group(1) if match else (query.get("X-Amz-Credential", [""])[0].split("/")[0])
        return self.functions_by_key.get(key, key or "anonymous")

    def record(
        self, phase: str, method: str, path: str, headers: dict[str, str], body: bytes, status: int, payload: bytes
    ) -> None:
        url = urlsplit(path)
        query = parse_qs(url.query, keep_blank_values=True)
        lower = {k.lower(): v for k, v in headers.items()}
        entry: dict[str, Any] = {
            "t": time.time(),
            "phase": phase,
            "function": self.function_of(headers, query),
            "status": status,
            "bytes_in": len(body),
            "bytes_out": len(payload),
            "wru": 0.0,
            "rru": 0.0,
            "items": 0,
        }
        target = lower.get("x-amz-target", "")
        if target.startswith("DynamoDB_"):
            entry["service"], entry["operation"] = "DynamoDB", target.split(".", 1)[1]
            try:
                request = json.loads(body or b"{}")
                response = json.loads(payload or b"{}") if status == 200 else {}
            except ValueError:
                request, response = {}, {}
            wru, rru, items = dynamodb_units(entry["operation"], request, response)
            entry.update(wru=wru, rru=rru, items=items)
            if status != 200:
                entry["operation"] += " (failed)"
        elif target.startswith("AmazonSQS."):
            entry["service"], entry["operation"] = "SQS", target.split(".", 1)[1]
        elif b"Action=" in body[:200] and "sqs" in lower.get("authorization", "").lower():
            action = parse_qs(body.decode(errors="replace")).get("Action", ["?"])[0]
            entry["service"], entry["operation"] = "SQS", action
        else:
            parts = unquote(url.path).lstrip("/").split("/", 1)
            key = parts[1] if len(parts) > 1 else ""
            entry["service"] = "S3"
            entry["operation"] = s3_operation(method, key, query, lower)
            entry["key"] = key
            if "range" in lower:
                entry["range"] = True
        with self.lock:
            self.entries.append(entry)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
