"""Small helpers for the tests that drive `/inference` with the real `tensorzero` client."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from tensorzero import TensorZeroError

import nimbus_testkit as kit

TEST_CONFIG_DIR = Path(__file__).resolve().parent / "tensorzero_config"

EMAIL_SYSTEM = {"sender_name": "Ada"}
EMAIL_USER = {"recipient": "Bob", "topic": "lunch"}


def write_test_config(parent: Path, upstream_api_base: str) -> Path:
    """A copy of the default config directory under `parent` with tensorzero_config/test_functions.toml
    appended (on the recording upstream at `upstream_api_base`) and the other files of
    tensorzero_config/ in its `test_files/`; the config file's path."""
    config_dir = parent / "config"
    shutil.copytree(kit.DEFAULT_CONFIG.parent, config_dir)
    (config_dir / "test_files").mkdir()
    for extra in TEST_CONFIG_DIR.iterdir():
        if extra.suffix != ".toml":
            shutil.copy(extra, config_dir / "test_files" / extra.name)
    additions = (TEST_CONFIG_DIR / "test_functions.toml").read_text()
    config = config_dir / kit.DEFAULT_CONFIG.name
    config.write_text(config.read_text() + "\n" + additions.replace("{upstream_api_base}", upstream_api_base))
    return config


def tag() -> str:
    """A unique marker to find a test's own request at the recording upstream."""
    return f"tag-{uuid.uuid4().hex[:12]}"


def uuid7_at(unix_ms: int) -> uuid.UUID:
    """A UUIDv7 whose timestamp is `unix_ms` (random bits zero)."""
    value = (unix_ms << 80) | (0x7 << 76) | (0b10 << 62)
    return uuid.UUID(int=value)


def client_body(**fields: Any) -> dict[str, Any]:
    """The body the `tensorzero` client sends (every key, most null), with `fields` set; for the
    few requests the typed client cannot make (it checks its own arguments)."""
    body: dict[str, Any] = {
        "function_name": None, "model_name": None, "episode_id": None, "namespace": None, "input": says("Hello"),
        "stream": None, "params": {"chat_completion": {}}, "variant_name": None, "dryrun": None, "internal": False,
        "tags": {}, "provider_tools": [], "output_schema": None, "credentials": {},
        "cache_options": {"max_age_s": None, "enabled": "off"}, "include_original_response": False,
        "include_raw_response": False, "include_raw_usage": False, "include_aggregated_response": False,
        "extra_body": [], "extra_headers": [], "internal_dynamic_variant_config": None,
    }  # fmt: skip
    body.update(fields)
    return body


def says(text: str, system: Any = None) -> dict[str, Any]:
    """An input with one user message of plain text (and `system` when given)."""
    value: dict[str, Any] = {"messages": [{"role": "user", "content": text}]}
    if system is not None:
        value["system"] = system
    return value


def email_input(user: dict[str, Any] | None = None, system: dict[str, Any] | None = None) -> dict[str, Any]:
    """draft_email's input: system arguments and a user message of template arguments (the client
    sends `{"type": "text", "arguments": …}` as a `template` block named `user`)."""
    return {
        "system": system or EMAIL_SYSTEM,
        "messages": [{"role": "user", "content": [{"type": "text", "arguments": user or EMAIL_USER}]}],
    }


def error_message(err: TensorZeroError) -> str:
    """The `error` string of TensorZero's error body `{"error": "<message>"}` (asserting that shape)."""
    body = json.loads(err.text or "")
    assert isinstance(body, dict) and set(body) == {"error"}, body
    assert isinstance(body["error"], str) and body["error"], body
    return body["error"]


def expect_error(status: int, call: Any, *args: Any, **kwargs: Any) -> str:
    """Call `call`, which must raise TensorZeroError with `status`; return the error message."""
    with pytest.raises(TensorZeroError) as raised:
        result = call(*args, **kwargs)
        if kwargs.get("stream"):
            list(result)
    assert raised.value.status_code == status, (raised.value.status_code, raised.value.text)
    return error_message(raised.value)


def text_of(response: Any) -> str:
    """The text blocks of a chat answer, joined."""
    return "".join(block.text for block in response.content if block.type == "text")
