"""Helpers for the async inference tests (Baseten-style `/async_predict`, test_async_*.py):

- `WebhookReceiver`: a real webhook receiver on 127.0.0.1 in a thread. Each path answers from its
  own script of statuses (then 200), and every POST is kept with its exact body bytes and headers.
- `AsyncApi`: the async routes of one server (or relay) with one key, `Bearer` or `Api-Key`.
- `verify_standard` / `verify_baseten`: a delivery's two signatures checked the way receivers do it,
  with the `standardwebhooks` package and with Baseten's documented recipe.
- `write_async_config`: a copy of the default config directory for these tests: a model on the
  recording upstream (mock_upstream.py), gateway retries off (so each async attempt is one upstream
  call) and a webhook retry schedule of seconds.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

import nimbus_testkit as kit

# The model on the recording upstream that the tests hold, fail and count.
UPSTREAM_MODEL = "async-mock"
# `[webhooks] retry_delays_s` of the test config: four attempts in all, about 3 s apart in total.
WEBHOOK_RETRY_DELAYS_S = [1, 1, 1]
WEBHOOK_ATTEMPTS = len(WEBHOOK_RETRY_DELAYS_S) + 1
FINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED", "EXPIRED", "CANCELED", "WEBHOOK_FAILED"})
# What a test server for async requests needs: scheduler passes every second (expiry, webhook
# retries), and one queue worker so a held request holds the whole queue.
ASYNC_SERVER_ENV = {"NIMBUS_SCHEDULE_INTERVAL_SECS": "1", "NIMBUS_BATCH_WORKERS": "1"}

_CONFIG_ADDITIONS = """
# ---------------------------------------------------------------------------------------------------
# Async inference tests (tests/python/async_kit.py): a model on the recording upstream.
[models.{model}]
routing = ["mock"]

[models.{model}.providers.mock]
type = "openai"
model_name = "async-mock-model"
api_base = "{upstream_api_base}"
api_key_location = "none"
"""


def write_async_config(parent: Path, upstream_api_base: str, *, retry_delays_s: Iterable[int] = WEBHOOK_RETRY_DELAYS_S) -> Path:
    """A copy of the default config directory under `parent` with `UPSTREAM_MODEL` on the upstream
    at `upstream_api_base`, `[gateway.retries] max_retries = 0` and `[webhooks] retry_delays_s`;
    the config file's path."""
    config_dir = parent / "config"
    shutil.copytree(kit.DEFAULT_CONFIG.parent, config_dir)
    config = config_dir / kit.DEFAULT_CONFIG.name
    text = config.read_text()
    retries = "[gateway.retries]\nmax_retries = 2\n"
    assert retries in text, "the default config's [gateway.retries] changed: update write_async_config"
    text = text.replace(retries, "[gateway.retries]\nmax_retries = 0\n")
    additions = _CONFIG_ADDITIONS.format(model=UPSTREAM_MODEL, upstream_api_base=upstream_api_base)
    config.write_text(with_webhook_retry_delays(text, retry_delays_s).rstrip() + "\n" + additions)
    return config


def with_webhook_retry_delays(config: str, retry_delays_s: Iterable[int]) -> str:
    """`config` (TOML text) with `[webhooks] retry_delays_s` set, in its `[webhooks]` table if it
    has one."""
    line = "retry_delays_s = [" + ", ".join(str(int(d)) for d in retry_delays_s) + "]"
    config = re.sub(r"(?m)^retry_delays_s\s*=.*\n?", "", config)
    if re.search(r"(?m)^\[webhooks\]\s*$", config):
        return re.sub(r"(?m)^\[webhooks\]\s*$", f"[webhooks]\n{line}", config, count=1)
    return f"{config.rstrip()}\n\n[webhooks]\n{line}\n"


def tag(prefix: str = "async") -> str:
    """A unique marker to find one test's requests at the upstream and the receiver."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def chat_input(text: str, *, model: str | None = "dummy", **body: Any) -> dict[str, Any]:
    """A `/v1/chat/completions` body for `model_input` (no `model` when `model` is None)."""
    model_input: dict[str, Any] = {"messages": kit.user(text), **body}
    if model is not None:
        model_input["model"] = model
    return model_input


# --------------------------------------------------------------------------------------------
# The webhook receiver
# --------------------------------------------------------------------------------------------


@dataclass
class ReceivedWebhook:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic() when it arrived
    answered: int

    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


class WebhookReceiver:
    """A webhook receiver on a free loopback port. `script(path, [500, 200])` makes `path` answer
    those statuses in turn (then 200); every POST is recorded."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scripts: dict[str, list[int]] = {}
        self._received: list[ReceivedWebhook] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = kit.read_request_body(self)
                with receiver._lock:
                    script = receiver._scripts.get(self.path) or []
                    status = script.pop(0) if script else 200
                    receiver._received.append(
                        ReceivedWebhook(
                            path=self.path,
                            headers={name.lower(): value for name, value in self.headers.items()},
                            body=body,
                            at=time.monotonic(),
                            answered=status,
                        )
                    )
                payload = b'{"ok": true}' if 200 <= status < 300 else b'{"ok": false}'
                self.send_response(status)
                if 300 <= status < 400:
                    # A redirect Nimbus must not follow.
                    self.send_header("location", "/followed-a-redirect")
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self.server.serve_forever, name="webhook-receiver", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def new_path(self, statuses: Iterable[int] = ()) -> str:
        """A fresh path answering `statuses` in turn (then 200)."""
        path = f"/hooks/{uuid.uuid4().hex[:16]}"
        self.script(path, statuses)
        return path

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def script(self, path: str, statuses: Iterable[int]) -> None:
        with self._lock:
            self._scripts[path] = list(statuses)

    def received(self, path: str | None = None) -> list[ReceivedWebhook]:
        with self._lock:
            return [hook for hook in self._received if path is None or hook.path == path]

    def wait_for(self, path: str, count: int = 1, *, timeout: float = 30.0) -> list[ReceivedWebhook]:
        """The POSTs to `path` once there are at least `count` (AssertionError after `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            hooks = self.received(path)
            if len(hooks) >= count:
                return hooks
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(hooks)} webhook(s) at {path} within {timeout:.0f}s, expected {count}")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def verify_standard(secret: str, hook: ReceivedWebhook) -> Any:
    """The body as `standardwebhooks.Webhook(secret).verify` returns it (raises if it does not verify)."""
    from standardwebhooks import Webhook  # noqa: PLC0415 - only these tests need it

    return Webhook(secret).verify(hook.body, hook.headers)


def verify_baseten(secret: str, hook: ReceivedWebhook) -> bool:
    """Baseten's recipe: HMAC-SHA256 of the raw body keyed by the secret string's own bytes, compared
    with each `v1=<hex>` of `X-BASETEN-SIGNATURE` (comma-separated during rotation)."""
    expected = hmac.new(secret.encode(), hook.body, hashlib.sha256).hexdigest()
    header = hook.headers.get("x-baseten-signature", "")
    return any(hmac.compare_digest(expected, part.strip().removeprefix("v1=")) for part in header.split(","))


# --------------------------------------------------------------------------------------------
# The async routes
# --------------------------------------------------------------------------------------------


class AsyncApi:
    """The async routes of `base_url` (a server root), authorised with `api_key` as `Bearer`
    (default) or Baseten's `Api-Key`; no key sends no authorization."""

    def __init__(self, base_url: str, api_key: str | None = None, *, scheme: str = "Bearer"):
        self.base_url = base_url.rstrip("/")
        self.session = requests.Session()
        if api_key is not None:
            self.session.headers["authorization"] = f"{scheme} {api_key}"

    def post(self, path: str, body: Any) -> requests.Response:
        return self.session.post(f"{self.base_url}{path}", json=body, timeout=30)

    def submit(self, body: dict[str, Any], *, path: str = "/async_predict") -> requests.Response:
        return self.post(path, body)

    def submit_ok(self, body: dict[str, Any], *, path: str = "/async_predict") -> str:
        response = self.submit(body, path=path)
        assert response.status_code == 200, (response.status_code, response.text)
        answer = response.json()
        assert set(answer) == {"request_id"}, answer
        return answer["request_id"]

    def get(self, request_id: str, *, prefix: str = "") -> requests.Response:
        return self.session.get(f"{self.base_url}{prefix}/async_request/{request_id}", timeout=30)

    def status(self, request_id: str) -> dict[str, Any]:
        response = self.get(request_id)
        assert response.status_code == 200, (response.status_code, response.text)
        return response.json()

    def cancel(self, request_id: str, *, prefix: str = "") -> requests.Response:
        return self.session.delete(f"{self.base_url}{prefix}/async_request/{request_id}", timeout=30)

    def output(self, request_id: str) -> requests.Response:
        return self.session.get(f"{self.base_url}/async_request/{request_id}/output", timeout=30)

    def list(self, **params: Any) -> requests.Response:
        return self.session.get(f"{self.base_url}/async_requests", params=params, timeout=30)

    def wait(
        self,
        request_id: str,
        until: Callable[[dict[str, Any]], bool] | None = None,
        *,
        timeout: float = 30.0,
        interval: float = 0.1,
    ) -> dict[str, Any]:
        """Poll the status until `until(status)` (default: a final status whose webhook is no longer
        pending); AssertionError with the last status after `timeout`."""
        until = until or settled
        deadline = time.monotonic() + timeout
        while True:
            status = self.status(request_id)
            if until(status):
                return status
            if time.monotonic() > deadline:
                raise AssertionError(f"async request {request_id} not there within {timeout:.0f}s; last: {status!r}")
            time.sleep(interval)


def settled(status: dict[str, Any]) -> bool:
    """A final status whose webhook (if any) has nothing left to do."""
    return status["status"] in FINAL_STATUSES and status["webhook_status"] != "PENDING"


def has_status(*statuses: str) -> Callable[[dict[str, Any]], bool]:
    return lambda status: status["status"] in statuses


def baseten_error(response: requests.Response) -> dict[str, Any]:
    """The body of an error of the async routes: `{"error": <message>, "code": <CODE>[, "field"]}`."""
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], body
    assert isinstance(body.get("code"), str) and body["code"].isupper(), body
    assert set(body) <= {"error", "code", "field"}, body
    return body
