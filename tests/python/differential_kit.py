"""A differential harness: the same configuration, requests and recording upstream through TensorZero's
own gateway (embedded in the pinned `tensorzero` package) and through Nimbus's local server, compared
field by field: the replies (ids and timestamps aside) and what each gateway sent upstream (path,
headers, body, JSON key order included).

- `write_configs(parent, api_base)`: differential_config/ copied under `parent`; returns the paths of
  `chat.toml` (chat_completion variants only) and `full.toml` (plus variants.toml: best-of-n and
  mixture-of-n).
- `TensorZeroSide` / `NimbusSide`: one gateway each, reached by `/inference` (TensorZero: the client in
  embedded mode; Nimbus: the same client in HTTP mode) and by `/openai/v1/chat/completions` (TensorZero:
  the HTTP gateway the package starts in-process; Nimbus: its own route).
- `Pair.inference(**kwargs)` / `Pair.openai(body)`: the call through both, one after the other, each
  with the upstream requests it caused; memoised per scenario name with `Pair.once`.
- `differences(tz, nimbus, ordered=…)` lists every difference; `assert_same` fails with that list.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from tensorzero import TensorZeroError, TensorZeroGateway

from mock_upstream import RecordedRequest, RecordingUpstream

CONFIG_DIR = Path(__file__).resolve().parent / "differential_config"

# Reply fields that differ by nature (ids minted per call, clocks): at the top of a reply or chunk
# (`id` and `created` are the OpenAI-compatible routes' inference id and clock), and anywhere.
TOP_IGNORED_KEYS = frozenset({"inference_id", "episode_id", "id", "created"})
IGNORED_KEYS = frozenset({"model_inference_id"})
# Headers a gateway's HTTP client sets for the connection itself, not for the model request.
TRANSPORT_HEADERS = frozenset(
    {"host", "content-length", "user-agent", "accept-encoding", "connection", "traceparent", "tracestate"}
)


def write_configs(parent: Path, upstream_api_base: str) -> tuple[Path, Path]:
    """differential_config/ under `parent`, on the upstream at `upstream_api_base`: (chat, full)."""
    config_dir = parent / "differential_config"
    shutil.copytree(CONFIG_DIR, config_dir)
    chat = (CONFIG_DIR / "chat.toml").read_text().replace("{upstream_api_base}", upstream_api_base)
    variants = (CONFIG_DIR / "variants.toml").read_text()
    (config_dir / "chat.toml").write_text(chat)
    full = config_dir / "full.toml"
    full.write_text(chat + variants)
    return config_dir / "chat.toml", full


# --------------------------------------------------------------------------------------------
# What one call gave
# --------------------------------------------------------------------------------------------


@dataclass
class Sent:
    """One request a gateway sent upstream: path, headers (transport headers aside), JSON body."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @classmethod
    def of(cls, recorded: RecordedRequest) -> Sent:
        headers = {name: value for name, value in recorded.raw_headers if name not in TRANSPORT_HEADERS}
        return cls(path=recorded.path, headers=headers, body=recorded.body)

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "headers": self.headers, "body": self.body}


@dataclass
class Outcome:
    """A call's HTTP status, its reply (normalised; for an error, the error text) and the upstream
    requests it caused, oldest first."""

    status: int
    reply: Any
    upstream: list[Sent] = field(default_factory=list)

    def upstream_dicts(self, *, as_set: bool = False) -> list[dict[str, Any]]:
        """The upstream requests; with `as_set`, in a canonical order (for calls made concurrently)."""
        sent = [request.as_dict() for request in self.upstream]
        if as_set:
            sent.sort(key=lambda request: json.dumps(request, sort_keys=True))
        return sent


def plain(value: Any, *, top: bool = True) -> Any:
    """A reply (a `tensorzero` reply object or parsed JSON) as JSON-like data, its ids and clocks
    dropped (`TOP_IGNORED_KEYS` at the top level only: a tool call's or a chunk block's `id` stays)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dict):
        dropped = IGNORED_KEYS | (TOP_IGNORED_KEYS if top else frozenset())
        return {key: plain(item, top=False) for key, item in value.items() if key not in dropped}
    if isinstance(value, list):
        return [plain(item, top=False) for item in value]
    return value


# --------------------------------------------------------------------------------------------
# The two gateways
# --------------------------------------------------------------------------------------------


class Side:
    """One gateway: `/inference` through a `tensorzero` client, `/openai/v1/chat/completions` over HTTP;
    each call gives (HTTP status, the reply normalised by `plain`, or the error body's text)."""

    def __init__(self, client: TensorZeroGateway, openai_base: str):
        self.client = client
        self.openai_base = openai_base

    def inference(self, **kwargs: Any) -> tuple[int, Any]:
        try:
            result = self.client.inference(**kwargs)
            if kwargs.get("stream"):
                return 200, [plain(chunk) for chunk in result]
            return 200, plain(result)
        except TensorZeroError as err:
            return err.status_code, err.text or ""

    def openai(self, body: dict[str, Any]) -> tuple[int, Any]:
        response = requests.post(f"{self.openai_base}/chat/completions", json=body, timeout=30)
        if response.status_code != 200:
            return response.status_code, response.text
        if body.get("stream"):
            return 200, _sse_events(response.text)
        return 200, plain(response.json())


def _sse_events(text: str) -> list[Any]:
    events: list[Any] = []
    for line in text.splitlines():
        if line.startswith("data:"):
            data = line[len("data:") :].strip()
            events.append(data if data == "[DONE]" else plain(json.loads(data)))
    return events


class TensorZeroSide(Side):
    """TensorZero's gateway in this process: the client in embedded mode for `/inference`, and the
    HTTP gateway the package can start (`tensorzero._start_http_gateway`, what
    `patch_openai_client` uses) for the OpenAI-compatible route."""

    def __init__(self, config: Path):
        import tensorzero  # noqa: PLC0415

        client = TensorZeroGateway.build_embedded(config_file=str(config), timeout=30)
        self.http = tensorzero._start_http_gateway(  # noqa: SLF001 - the package's own in-process gateway
            config_file=str(config), clickhouse_url=None, postgres_url=None, valkey_url=None, async_setup=False
        )
        super().__init__(client, self.http.base_url.rstrip("/"))

    def close(self) -> None:
        self.client.close()
        self.http.close()


class NimbusSide(Side):
    """Nimbus's local server, through the same client in HTTP mode."""

    def __init__(self, base_url: str):
        super().__init__(TensorZeroGateway.build_http(gateway_url=base_url, timeout=30), f"{base_url}/openai/v1")

    def close(self) -> None:
        self.client.close()


class Pair:
    """TensorZero and Nimbus on one recording upstream."""

    def __init__(self, tensorzero: Side, nimbus: Side, upstream: RecordingUpstream):
        self.tensorzero = tensorzero
        self.nimbus = nimbus
        self.upstream = upstream
        self._memo: dict[str, tuple[Outcome, Outcome]] = {}

    def _both(self, call: Callable[[Side], tuple[int, Any]]) -> tuple[Outcome, Outcome]:
        outcomes = []
        for side in (self.tensorzero, self.nimbus):
            mark = self.upstream.count()
            status, reply = call(side)
            outcomes.append(Outcome(status, reply, [Sent.of(r) for r in self.upstream.since(mark)]))
        return outcomes[0], outcomes[1]

    def inference(self, **kwargs: Any) -> tuple[Outcome, Outcome]:
        return self._both(lambda side: side.inference(**kwargs))

    def openai(self, body: dict[str, Any]) -> tuple[Outcome, Outcome]:
        return self._both(lambda side: side.openai(body))

    def once(self, name: str, call: Callable[[Pair], tuple[Outcome, Outcome]]) -> tuple[Outcome, Outcome]:
        """`call(self)`, made once per scenario `name` (a test of the reply and one of the upstream
        requests share it)."""
        if name not in self._memo:
            self._memo[name] = call(self)
        return self._memo[name]


# --------------------------------------------------------------------------------------------
# Comparing
# --------------------------------------------------------------------------------------------


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 300 else text[:300] + "…"


def differences(tz: Any, nimbus: Any, *, ordered: bool, path: str = "$") -> list[str]:
    """Every difference between TensorZero's value and Nimbus's, one line each; with `ordered`, the
    key order of JSON objects counts too."""
    if isinstance(tz, dict) and isinstance(nimbus, dict):
        found: list[str] = []
        for key in tz:
            if key not in nimbus:
                found.append(f"{path}.{key}: TensorZero {_show(tz[key])}, Nimbus absent")
            else:
                found.extend(differences(tz[key], nimbus[key], ordered=ordered, path=f"{path}.{key}"))
        found.extend(f"{path}.{key}: TensorZero absent, Nimbus {_show(nimbus[key])}" for key in nimbus if key not in tz)
        common_tz = [key for key in tz if key in nimbus]
        common_nimbus = [key for key in nimbus if key in tz]
        if ordered and common_tz != common_nimbus:
            found.append(f"{path}: key order TensorZero {common_tz}, Nimbus {common_nimbus}")
        return found
    if isinstance(tz, list) and isinstance(nimbus, list):
        found = []
        for index, (left, right) in enumerate(zip(tz, nimbus)):
            found.extend(differences(left, right, ordered=ordered, path=f"{path}[{index}]"))
        if len(tz) != len(nimbus):
            found.append(
                f"{path}: {len(tz)} items from TensorZero, {len(nimbus)} from Nimbus; extra: {_show(tz[len(nimbus):] or nimbus[len(tz):])}"
            )
        return found
    if type(tz) is not type(nimbus) and not (isinstance(tz, (int, float)) and isinstance(nimbus, (int, float))):
        return [f"{path}: TensorZero {_show(tz)}, Nimbus {_show(nimbus)}"]
    if tz != nimbus or isinstance(tz, bool) != isinstance(nimbus, bool):
        return [f"{path}: TensorZero {_show(tz)}, Nimbus {_show(nimbus)}"]
    return []


def assert_same(tz: Any, nimbus: Any, *, ordered: bool = False, what: str = "") -> None:
    found = differences(tz, nimbus, ordered=ordered)
    assert not found, f"{what}: {len(found)} difference(s)\n" + "\n".join(found)


def assert_same_reply(tz: Outcome, nimbus: Outcome) -> None:
    """The same status and the same reply (for an error, the status alone: messages are worded
    differently; both are shown if the statuses differ)."""
    if tz.status != 200 or nimbus.status != 200:
        assert (
            tz.status == nimbus.status
        ), f"status: TensorZero {tz.status} ({tz.reply!r}), Nimbus {nimbus.status} ({nimbus.reply!r})"
        return
    assert_same(tz.reply, nimbus.reply, what="reply")


def assert_same_upstream(tz: Outcome, nimbus: Outcome, *, as_set: bool = False) -> None:
    """The same upstream requests: path, headers and body, key order included. With `as_set`
    (requests made concurrently) they are paired in a canonical order first."""
    assert_same(tz.upstream_dicts(as_set=as_set), nimbus.upstream_dicts(as_set=as_set), ordered=True, what="upstream requests")
