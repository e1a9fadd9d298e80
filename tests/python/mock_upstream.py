"""A recording OpenAI-compatible upstream for the tests: `POST /v1/chat/completions` on a loopback
port, in a thread. Every request is kept (path, lower-cased headers, JSON body), so a test can check
what the gateway really sent: the model name, `n`, `extra_body` edits, headers, the bearer key.

Answers: `n` choices `Hello from choice <i>` (streamed interleaved, like OpenAI, with a usage chunk
last). A request whose last message contains a marker behaves differently:
- `[upstream-fails]`: HTTP 500 with an OpenAI error body.
- `[fail-times:N:KEY]`: the first N requests carrying this marker (counted per KEY) get that HTTP 500,
  later ones answer normally: a model that fails N times, then recovers.
- `[stream-breaks]` (streamed): one content chunk, then an `{"error": …}` event and no `[DONE]`.
- `[stream-stalls]` (streamed): one content chunk, then `STALL_SECONDS` of silence before the rest.
- `[finish:REASON]`: every choice finishes with `REASON` (e.g. TGI's `eos_token`) instead of `stop`.
- `[call:NAME]`: the answer is a call of tool NAME with arguments `{"zone": "UTC"}` (streamed in two
  pieces); `[call-garbled:NAME]` the same with arguments that are not JSON.
- `[reply-json]`: every choice's content is `JSON_REPLY` (a JSON object) instead of the greeting.
- `[reply-cot]`: the content is `COT_REPLY`, a chain of thought's `{"thinking", "response"}` answer.
- `[echo-model]`: the content is `answer from <model>`, so candidates on different models differ.

Ensembles: requests for model `JUDGE_MODEL` (a best-of-n judge) answer `{"thinking", "answer_choice"}`
with the index of a `[judge-picks:N]` marker anywhere in the messages (0 without one); with
`[judge-fails]` they get the HTTP 500, with `[judge-garbage]` text that is not JSON. Requests for
model `FUSER_MODEL` (a mixture-of-n fuser) answer `FUSED_REPLY` (streamed in two pieces), or the
HTTP 500 with `[fuser-fails]` anywhere in the messages.

`hold(marker)` keeps the answers to requests mentioning `marker` back (they are recorded at once)
until its block ends, so a test can look at a gateway while calls are in flight.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAIL_MARKER = "[upstream-fails]"
FAIL_TIMES_MARKER = re.compile(r"\[fail-times:(\d+):([A-Za-z0-9_-]+)\]")
STREAM_BREAK_MARKER = "[stream-breaks]"
STREAM_STALL_MARKER = "[stream-stalls]"
STALL_SECONDS = 6.0
FINISH_MARKER = re.compile(r"\[finish:([a-z_]+)\]")
CALL_MARKER = re.compile(r"\[call(-garbled)?:([A-Za-z0-9_-]+)\]")
TOOL_ARGUMENTS = '{"zone": "UTC"}'
JSON_REPLY_MARKER = "[reply-json]"
JSON_REPLY = '{"answer": "yes"}'
COT_REPLY = '{"thinking": "step by step", "response": {"answer": "yes"}}'
ECHO_MODEL_MARKER = "[echo-model]"
JUDGE_MODEL = "judge-model"
JUDGE_PICKS_MARKER = re.compile(r"\[judge-picks:(\d+)\]")
FUSER_MODEL = "fuser-model"
FUSED_REPLY = "fused answer"
HOLD_LIMIT_SECONDS = 60.0


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw_headers: list[tuple[str, str]]

    def header_values(self, name: str) -> list[str]:
        """Every value sent for `name` (a header repeated on the wire gives several)."""
        return [value for key, value in self.raw_headers if key == name.lower()]


def _last_text(body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    if not messages:
        return ""
    content = messages[-1].get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


class RecordingUpstream:
    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._held: dict[str, threading.Event] = {}
        # `[fail-times:N:KEY]`: requests seen so far per KEY.
        self._fail_counts: dict[str, int] = {}
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                raw_headers = [(name.lower(), value) for name, value in self.headers.items()]
                recorded = RecordedRequest(
                    path=self.path,
                    headers={name: value for name, value in raw_headers},
                    body=body,
                    raw_headers=raw_headers,
                )
                with upstream._lock:
                    upstream.requests.append(recorded)
                    messages = json.dumps(body.get("messages"))
                    gates = [gate for marker, gate in upstream._held.items() if marker in messages]
                for gate in gates:
                    gate.wait(HOLD_LIMIT_SECONDS)
                text = _last_text(body)
                ensemble = self._ensemble_answer(body, messages)
                if ensemble is not None:
                    status, content = ensemble
                    if status != 200:
                        self._fail()
                    elif body.get("stream"):
                        self._stream_pieces(body, [content[: len(content) // 2], content[len(content) // 2 :]])
                    else:
                        self._answer(body, "stop", content)
                    return
                if FAIL_MARKER in text or upstream._fails_this_time(text):
                    self._fail()
                    return
                finish = FINISH_MARKER.search(text)
                finish_reason = finish.group(1) if finish else "stop"
                call = CALL_MARKER.search(text)
                if call:
                    arguments = "{not json" if call.group(1) else TOOL_ARGUMENTS
                    self._tool_call(body, call.group(2), arguments)
                    return
                if body.get("stream") and STREAM_STALL_MARKER in text:
                    self._stalling_stream(body)
                    return
                if body.get("stream"):
                    self._stream(body, finish_reason, breaks=STREAM_BREAK_MARKER in text)
                    return
                content = JSON_REPLY if JSON_REPLY_MARKER in text else None
                if "[reply-cot]" in text:
                    content = COT_REPLY
                if ECHO_MODEL_MARKER in text:
                    content = f"answer from {body.get('model')}"
                self._answer(body, finish_reason, content)

            def _fail(self) -> None:
                error = {"error": {"message": "mock upstream failed", "type": "server_error", "param": None, "code": None}}
                self._send(500, "application/json", json.dumps(error).encode())

            def _ensemble_answer(self, body: dict[str, Any], messages: str) -> tuple[int, str] | None:
                """A judge's or fuser's answer `(status, content)`; None for other requests."""
                if body.get("model") == JUDGE_MODEL:
                    if "[judge-fails]" in messages:
                        return 500, ""
                    if "[judge-garbage]" in messages:
                        return 200, "I like the second one."
                    picks = JUDGE_PICKS_MARKER.search(messages)
                    choice = int(picks.group(1)) if picks else 0
                    return 200, json.dumps({"thinking": "weighed them", "answer_choice": choice})
                if body.get("model") == FUSER_MODEL:
                    return (500, "") if "[fuser-fails]" in messages else (200, FUSED_REPLY)
                return None

            def _stream_pieces(self, body: dict[str, Any], pieces: list[str]) -> None:
                base = {"id": "chatcmpl-up", "created": 1, "model": body.get("model"), "object": "chat.completion.chunk"}
                events = [{**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]
                events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                events.append({**base, "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}})
                payload = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                self._send(200, "text/event-stream", payload.encode())

            def _tool_call(self, body: dict[str, Any], name: str, arguments: str) -> None:
                usage = {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
                base = {"id": "chatcmpl-up", "created": 1, "model": body.get("model")}
                if not body.get("stream"):
                    call = {"id": "call_up_1", "type": "function", "function": {"name": name, "arguments": arguments}}
                    message = {"role": "assistant", "content": None, "tool_calls": [call]}
                    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
                    answer = {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
                    self._send(200, "application/json", json.dumps(answer).encode())
                    return
                half = len(arguments) // 2
                first = {"index": 0, "id": "call_up_1", "type": "function", "function": {"name": name, "arguments": arguments[:half]}}
                second = {"index": 0, "function": {"arguments": arguments[half:]}}
                deltas = [
                    {"index": 0, "delta": {"role": "assistant", "tool_calls": [first]}, "finish_reason": None},
                    {"index": 0, "delta": {"tool_calls": [second]}, "finish_reason": None},
                    {"index": 0, "delta": {}, "finish_reason": "tool_calls"},
                ]
                events = [{**base, "object": "chat.completion.chunk", "choices": [d]} for d in deltas]
                events.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
                payload = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                self._send(200, "text/event-stream", payload.encode())

            def _answer(self, body: dict[str, Any], finish_reason: str, content: str | None = None) -> None:
                n = int(body.get("n") or 1)
                choices = [
                    {
                        "index": i,
                        "message": {"role": "assistant", "content": content or f"Hello from choice {i}"},
                        "finish_reason": finish_reason,
                    }
                    for i in range(n)
                ]
                usage = {"prompt_tokens": 4, "completion_tokens": 4 * n, "total_tokens": 4 + 4 * n}
                answer = {"id": "chatcmpl-up", "created": 1, "model": body.get("model"), "object": "chat.completion"}
                answer.update(choices=choices, usage=usage)
                self._send(200, "application/json", json.dumps(answer).encode())

            def _stream(self, body: dict[str, Any], finish_reason: str, *, breaks: bool) -> None:
                n = int(body.get("n") or 1)
                base = {"id": "chatcmpl-up", "created": 1, "model": body.get("model"), "object": "chat.completion.chunk"}
                events: list[dict[str, Any]] = []
                for piece in ("Hello ", "from choice "):
                    for index in range(n):
                        events.append({**base, "choices": [{"index": index, "delta": {"content": piece}, "finish_reason": None}]})
                    if breaks:
                        events.append({"error": {"message": "mock upstream broke off mid-stream", "type": "server_error"}})
                        payload = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
                        self._send(200, "text/event-stream", payload.encode())
                        return
                for index in range(n):
                    delta = {"index": index, "delta": {"content": str(index)}, "finish_reason": finish_reason}
                    events.append({**base, "choices": [delta]})
                usage = {"prompt_tokens": 4, "completion_tokens": 4 * n, "total_tokens": 4 + 4 * n}
                events.append({**base, "choices": [], "usage": usage})
                payload = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                self._send(200, "text/event-stream", payload.encode())

            def _stalling_stream(self, body: dict[str, Any]) -> None:
                """Chunked, so the first chunk leaves before the stall."""
                base = {"id": "chatcmpl-up", "created": 1, "model": body.get("model"), "object": "chat.completion.chunk"}
                first = {**base, "choices": [{"index": 0, "delta": {"content": "Hello "}, "finish_reason": None}]}
                last = {**base, "choices": [{"index": 0, "delta": {"content": "late"}, "finish_reason": "stop"}]}
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                try:
                    for index, payload in enumerate((f"data: {json.dumps(first)}\n\n", f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n")):
                        if index:
                            time.sleep(STALL_SECONDS)
                        data = payload.encode()
                        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the gateway gave up on the stream: what the test wants

            def _send(self, status: int, content_type: str, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="recording-upstream", daemon=True)
        self.thread.start()

    def _fails_this_time(self, text: str) -> bool:
        """Count a request with a `[fail-times:N:KEY]` marker; whether it is one of the first N."""
        marker = FAIL_TIMES_MARKER.search(text)
        if marker is None:
            return False
        times, key = int(marker.group(1)), marker.group(2)
        with self._lock:
            seen = self._fail_counts.get(key, 0)
            self._fail_counts[key] = seen + 1
        return seen < times

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @property
    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return [request.body for request in self.requests]

    def last(self) -> RecordedRequest:
        with self._lock:
            assert self.requests, "the upstream received no request"
            return self.requests[-1]

    def with_text(self, marker: str) -> list[RecordedRequest]:
        """The requests whose messages mention `marker` (a test's unique tag), oldest first."""
        with self._lock:
            return [r for r in self.requests if marker in json.dumps(r.body.get("messages"))]

    def one_with_text(self, marker: str) -> RecordedRequest:
        found = self.with_text(marker)
        assert len(found) == 1, f"expected one upstream request mentioning {marker!r}, got {len(found)}"
        return found[0]

    @contextmanager
    def hold(self, marker: str) -> Iterator[None]:
        """Answer no request that mentions `marker` until the block ends (or `HOLD_LIMIT_SECONDS`)."""
        gate = threading.Event()
        with self._lock:
            self._held[marker] = gate
        try:
            yield
        finally:
            with self._lock:
                self._held.pop(marker, None)
            gate.set()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
