"""Provider-native batches end to end: a second Nimbus is the provider (it speaks the OpenAI Files
and Batches API), and a downstream Nimbus sends the lines of its `cheap*` models there with
`batch = "native"` while `local` runs on its own workers.

- The upstream: `nimbus serve` with dummy models (`UPSTREAM_CONFIG`) and one API key; `NativeUpstream`
  holds it with the OpenAI SDK on that key and finds the batches a downstream batch made there
  (`parts_of`). The downstream reaches it through a `RecordingRelay`, because it deletes its files
  there once collected: `sent` and `received` give what was uploaded and downloaded.
- The downstream (`downstream_config`): models `cheap` (→ `up-model`), `cheap-failing` (→ a model
  that always fails upstream), `cheap-slow` (→ `SLOW_LATENCY_MS` per line, one line at a time),
  `cheap-unknown` (→ a model the upstream does not know, so the upstream batch fails validation),
  `cheap-embedding`, `cheap-dynamic` (→ `up-model` with the key sent in each line's
  `credentials`); `rejecting` and `vanishing` on the scripted fake (mock_batch_upstream.py);
  `local` (dummy, on workers); functions `native_chat` (its only variant on `cheap`) and
  `native_dynamic_chat` (on `cheap-dynamic`).
- Fixtures (module scope; import them into a test module): `upstream`, `fake_provider`,
  `downstream_factory`, `downstream`, `sdk` (the OpenAI SDK on the downstream), `split_downstream`/`split_sdk` (the same
  config with `native_max_lines = SPLIT_MAX_LINES`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest

import nimbus_testkit as kit
from mock_batch_upstream import FakeBatchUpstream, RecordingRelay

UPSTREAM_KEY_ENV = "UPSTREAM_KEY"
SLOW_LATENCY_MS = 700
SPLIT_MAX_LINES = 3
UNKNOWN_UPSTREAM_MODEL = "no-such-upstream-model"

# Lines run one at a time upstream with progress saved often, so a slow batch is seen midway.
UPSTREAM_CONFIG = f"""
[gateway.retries]
max_retries = 0

[batches]
line_concurrency = 1
checkpoint_interval_ms = 100

[models.up-model]
routing = ["dummy"]
[models.up-model.providers.dummy]
type = "dummy"

[models.up-failing]
routing = ["failing"]
[models.up-failing.providers.failing]
type = "dummy"
fail_with_status = 500

[models.up-slow]
routing = ["dummy"]
[models.up-slow.providers.dummy]
type = "dummy"
latency_ms = {SLOW_LATENCY_MS}

[models.up-embedding]
routing = ["dummy"]
[models.up-embedding.providers.dummy]
type = "dummy"
embedding_dimensions = 8
"""

# Downstream model → (upstream model_name, fake script or None for the upstream Nimbus).
NATIVE_MODELS: dict[str, tuple[str, str | None]] = {
    "cheap": ("up-model", None),
    "cheap-failing": ("up-failing", None),
    "cheap-slow": ("up-slow", None),
    "cheap-unknown": (UNKNOWN_UPSTREAM_MODEL, None),
    "cheap-embedding": ("up-embedding", None),
    "rejecting": ("fake-model", "reject"),
    "vanishing": ("fake-model", "vanish"),
}
# Native models whose upstream key comes with each batch line (`credentials`), sealed at rest.
DYNAMIC_MODELS: dict[str, str] = {"cheap-dynamic": "up-model"}
DYNAMIC_CREDENTIAL = "upstream_key"


def downstream_config(upstream_api_base: str, fake: FakeBatchUpstream, *, native_max_lines: int = 50_000) -> str:
    """The downstream's config: every model of `NATIVE_MODELS` native, `local` on workers."""
    parts = [
        "[gateway.retries]\nmax_retries = 0\n",
        "[batches]\nnative_poll_interval_ms = 200\nnative_poll_max_interval_ms = 1000\n"
        f"native_max_lines = {native_max_lines}\nnative_max_bytes = 200000000\n",
        '[models.local]\nrouting = ["d"]\n[models.local.providers.d]\ntype = "dummy"\n',
    ]
    for model, (model_name, script) in NATIVE_MODELS.items():
        api_base = upstream_api_base if script is None else fake.api_base(script)
        parts.append(
            f'[models.{model}]\nrouting = ["up"]\n[models.{model}.providers.up]\ntype = "openai"\n'
            f'model_name = "{model_name}"\napi_base = "{api_base}"\n'
            f'api_key_location = "env::{UPSTREAM_KEY_ENV}"\nbatch = "native"\n'
        )
    for model, model_name in DYNAMIC_MODELS.items():
        parts.append(
            f'[models.{model}]\nrouting = ["up"]\n[models.{model}.providers.up]\ntype = "openai"\n'
            f'model_name = "{model_name}"\napi_base = "{upstream_api_base}"\n'
            f'api_key_location = "dynamic::{DYNAMIC_CREDENTIAL}"\nbatch = "native"\n'
        )
    parts.append(
        '[functions.native_chat]\ntype = "chat"\n'
        '[functions.native_chat.variants.cheap]\ntype = "chat_completion"\nmodel = "cheap"\n'
    )
    parts.append(
        '[functions.native_dynamic_chat]\ntype = "chat"\n'
        '[functions.native_dynamic_chat.variants.dynamic]\ntype = "chat_completion"\nmodel = "cheap-dynamic"\n'
    )
    return "\n".join(parts)


@dataclass
class NativeUpstream:
    """The upstream Nimbus, the OpenAI SDK on its key, and the relay the downstream reaches it by."""

    server: kit.NimbusServer
    key: str
    sdk: openai.OpenAI
    relay: RecordingRelay

    def parts_of(self, batch_id: str) -> list[Any]:
        """The upstream batches a downstream batch created, by `nimbus_part`."""
        found = [b for b in self.sdk.batches.list(limit=100).data if (b.metadata or {}).get("nimbus_batch") == batch_id]
        return sorted(found, key=lambda b: int(b.metadata["nimbus_part"]))

    def sent(self, batch_id: str, part: int) -> tuple[str, list[dict[str, Any]], dict[str, str]]:
        """What downstream batch `batch_id` uploaded for `part` (`nimbus-<batch id>-<part:04>.jsonl`):
        (the upstream's file id, the JSONL lines, the form fields)."""
        return self.relay.uploaded(f"nimbus-{batch_id}-{part:04d}.jsonl")

    def uploads_of(self, batch_id: str) -> list[str]:
        """The names of every file downstream batch `batch_id` uploaded."""
        return sorted(name for _, name, _, _ in self.relay.uploads() if name.startswith(f"nimbus-{batch_id}-"))

    def received(self, upstream_batch: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(output lines, error lines) of an upstream batch as the downstream downloaded them."""
        output, errors = upstream_batch.output_file_id, upstream_batch.error_file_id
        return (self.relay.downloaded(output) if output else [], self.relay.downloaded(errors) if errors else [])

    def results(self, upstream_batch: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(output lines, error lines) of an upstream batch, read from the upstream itself."""
        return kit.batch_results(self.sdk, upstream_batch)

    def wait(self, upstream_batch_id: str, until: Callable[[Any], bool] | None = None, timeout: float = 30) -> Any:
        return kit.wait_for_batch(self.sdk, upstream_batch_id, until=until, timeout=timeout)

    def direct_answer(self, model: str, text: str) -> Any:
        """What the upstream answers a synchronous chat request (the dummy is deterministic)."""
        return self.sdk.chat.completions.create(model=model, messages=kit.user(text))


def wait_for_parts(upstream: NativeUpstream, batch_id: str, count: int, timeout: float = 20) -> list[Any]:
    """Wait until the downstream batch `batch_id` has `count` upstream batches; those."""
    found: list[Any] = []

    def enough() -> bool:
        found[:] = upstream.parts_of(batch_id)
        return len(found) >= count

    kit.wait_until(enough, timeout=timeout, interval=0.2, what=f"{count} upstream batch(es) of {batch_id}")
    return found


def text_of_line(line: dict[str, Any]) -> str:
    """The user text of a chat request line (as `kit.chat_line` writes it)."""
    return line["body"]["messages"][-1]["content"]


def upstream_line_texts(lines: list[dict[str, Any]]) -> list[str]:
    return sorted(text_of_line(line) for line in lines)


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def upstream(server_factory: Callable[..., kit.NimbusServer], tmp_path_factory: pytest.TempPathFactory) -> Iterator[NativeUpstream]:
    config = tmp_path_factory.mktemp("native-upstream-config") / "nimbus.toml"
    config.write_text(UPSTREAM_CONFIG)
    created: dict[str, Any] = {}

    def create(cli: kit.NimbusCli) -> None:
        created.update(cli.create_key("upstream-provider", name="downstream-nimbus"))

    server = server_factory("nimbus-native-upstream", before_start=create, config=config, extra_env=kit.BATCH_SERVER_ENV)
    relay = RecordingRelay(server.base_url)
    try:
        with kit.make_client(server.api_base, api_key=created["api_key"]) as client:
            yield NativeUpstream(server, created["api_key"], client, relay)
    finally:
        relay.stop()


@pytest.fixture(scope="module")
def fake_provider() -> Iterator[FakeBatchUpstream]:
    fake = FakeBatchUpstream()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def downstream_factory(
    upstream: NativeUpstream,
    fake_provider: FakeBatchUpstream,
    server_factory: Callable[..., kit.NimbusServer],
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[..., kit.NimbusServer]:
    """`start(name, **config_options)`: a downstream on `downstream_config(…, **config_options)`
    with the scheduler every second, short windows allowed and the upstream's key in its environment."""

    def start(name: str, **config_options: Any) -> kit.NimbusServer:
        config = tmp_path_factory.mktemp(name) / "nimbus.toml"
        config.write_text(downstream_config(upstream.relay.api_base, fake_provider, **config_options))
        env = {**kit.BATCH_SERVER_ENV, UPSTREAM_KEY_ENV: upstream.key}
        return server_factory(name, config=config, extra_env=env)

    return start


@pytest.fixture(scope="module")
def downstream(downstream_factory: Callable[..., kit.NimbusServer]) -> kit.NimbusServer:
    return downstream_factory("nimbus-native-downstream")


@pytest.fixture(scope="module")
def split_downstream(downstream_factory: Callable[..., kit.NimbusServer]) -> kit.NimbusServer:
    return downstream_factory("nimbus-native-split", native_max_lines=SPLIT_MAX_LINES)


@pytest.fixture(scope="module")
def sdk(downstream: kit.NimbusServer) -> Iterator[openai.OpenAI]:
    with kit.make_client(downstream.api_base) as client:
        yield client


@pytest.fixture(scope="module")
def split_sdk(split_downstream: kit.NimbusServer) -> Iterator[openai.OpenAI]:
    with kit.make_client(split_downstream.api_base) as client:
        yield client

