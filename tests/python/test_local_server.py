"""`nimbus serve` itself: health, startup line, defaults, binding and persistence."""

from __future__ import annotations

import re
from collections.abc import Callable

import requests

import nimbus_testkit as kit


def test_health(nimbus_server: kit.NimbusServer) -> None:
    response = requests.get(f"{nimbus_server.base_url}/health", timeout=10)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response.headers.get("x-request-id")


def test_startup_line_names_the_address(nimbus_server: kit.NimbusServer) -> None:
    log = nimbus_server.process.log_text(max_chars=100_000)
    assert re.search(rf"listening on http://127\.0\.0\.1:{nimbus_server.port}\b", log), log


def test_default_config_is_the_repo_one(server_factory: Callable[..., kit.NimbusServer]) -> None:
    """Without NIMBUS_CONFIG, run from the repo root, the server loads infra/config/nimbus.toml."""
    server = server_factory("nimbus-default-config", config=None)
    assert "NIMBUS_CONFIG" not in server.env
    models = requests.get(f"{server.api_base}/models", timeout=10).json()
    assert {"dummy", "dummy-embedding", "dummy-error"} <= {m["id"] for m in models["data"]}
    assert "config: infra/config/nimbus.toml" in server.process.log_text(max_chars=100_000)


def test_started_elsewhere_it_serves_the_built_in_default_config_and_says_so(
    server_factory: Callable[..., kit.NimbusServer], tmp_path
) -> None:
    """An installed `nimbus serve` run outside the repository (no infra/config/nimbus.toml under the
    current directory, no NIMBUS_CONFIG) serves the default config compiled into the binary, and
    its start-up says so and what to pass for another."""
    server = server_factory("nimbus-elsewhere", config=None, cwd=tmp_path)
    models = requests.get(f"{server.api_base}/models", timeout=10).json()
    assert {"dummy", "dummy-embedding", "dummy-error"} <= {m["id"] for m in models["data"]}
    functions = requests.post(
        f"{server.base_url}/inference",
        json={"function_name": "extract_contact", "input": {"messages": [{"role": "user", "content": [
            {"type": "template", "name": "document", "arguments": {"document": "Ann Lee, ann@example.com"}}]}]}},
        timeout=10,
    )
    assert functions.status_code == 200, functions.text
    log = server.process.log_text(max_chars=100_000)
    assert "the default configuration built into this binary" in log, log
    assert "--config FILE" in log and "NIMBUS_CONFIG" in log, log


def test_non_loopback_bind_requires_keys_even_without_any(server_factory: Callable[..., kit.NimbusServer]) -> None:
    """Open mode is for loopback only: on 0.0.0.0 with no keys, /v1 is closed."""
    server = server_factory("nimbus-any-address", bind="0.0.0.0")  # noqa: S104 - requests only go to loopback
    response = requests.get(f"{server.api_base}/models", timeout=10)
    assert response.status_code == 401, response.text
    kit.error_envelope(response)
    assert requests.get(f"{server.base_url}/health", timeout=10).status_code == 200


def test_keys_survive_a_restart(server_factory: Callable[..., kit.NimbusServer], tmp_path) -> None:
    data_dir = tmp_path / "persistent"
    created: dict = {}
    first = server_factory("nimbus-restart-1", before_start=lambda cli: created.update(cli.create_key("persist")), data_dir=data_dir)
    headers = {"Authorization": f"Bearer {created['api_key']}"}
    assert requests.get(f"{first.api_base}/models", headers=headers, timeout=10).status_code == 200
    first.stop()
    second = server_factory("nimbus-restart-2", data_dir=data_dir)
    assert requests.get(f"{second.api_base}/models", timeout=10).status_code == 401
    assert requests.get(f"{second.api_base}/models", headers=headers, timeout=10).status_code == 200
