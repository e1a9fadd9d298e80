"""API keys: open local server without keys, required once a key exists, revocation, the CLI."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import openai
import pytest
import requests

import nimbus_testkit as kit

HELLO = [{"role": "user", "content": "hello"}]
AUTH_CODES = {"invalid_api_key", "missing_api_key"}


def wait_for_status(url: str, status: int, *, headers: dict[str, str] | None = None, timeout: float = 5.0) -> float:
    """Poll `url` until it answers `status`; return how long that took."""
    started = time.monotonic()
    last = None
    while time.monotonic() - started < timeout:
        last = requests.get(url, headers=headers or {}, timeout=10)
        if last.status_code == status:
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"{url} still answers {last.status_code if last else None} after {timeout}s, not {status}")


# --------------------------------------------------------------------------------------------
# Open server (loopback, no keys)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer anything-at-all"}, {"Authorization": "garbage"}])
def test_open_server_accepts_any_or_no_key(nimbus_server: kit.NimbusServer, headers: dict[str, str]) -> None:
    response = requests.get(f"{nimbus_server.api_base}/models", headers=headers, timeout=10)
    assert response.status_code == 200, response.text


def test_open_server_works_with_the_sdk_and_any_key(nimbus_server: kit.NimbusServer) -> None:
    with kit.make_client(nimbus_server.api_base, api_key="sk-not-a-nimbus-key") as sdk:
        assert sdk.chat.completions.create(model="dummy", messages=HELLO).choices[0].message.content


# --------------------------------------------------------------------------------------------
# Server with keys
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(keyed_server: tuple[kit.NimbusServer, dict[str, Any]]) -> tuple[kit.NimbusServer, str]:
    server, created = keyed_server
    return server, created["api_key"]


def test_right_key_works_for_every_route(keyed: tuple[kit.NimbusServer, str]) -> None:
    server, api_key = keyed
    with kit.make_client(server.api_base, api_key=api_key) as sdk:
        assert {m.id for m in sdk.models.list().data} >= {"dummy"}
        assert sdk.chat.completions.create(model="dummy", messages=HELLO).choices[0].message.content
        with sdk.chat.completions.create(model="dummy", messages=HELLO, stream=True) as stream:
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert len(sdk.embeddings.create(model="dummy-embedding", input="x").data[0].embedding) == 16


def test_wrong_key_is_401_invalid_api_key(keyed: tuple[kit.NimbusServer, str]) -> None:
    server, _ = keyed
    with kit.make_client(server.api_base, api_key="nmb_wrong") as sdk:
        with pytest.raises(openai.AuthenticationError) as raised:
            sdk.chat.completions.create(model="dummy", messages=HELLO)
    err = raised.value
    assert err.status_code == 401
    assert err.code == "invalid_api_key"
    kit.error_envelope(err.response)
    assert err.request_id


def test_right_id_with_wrong_secret_is_401(keyed: tuple[kit.NimbusServer, str]) -> None:
    server, api_key = keyed
    prefix, _, secret = api_key.rpartition("_")
    forged = f"{prefix}_{'A' * len(secret)}"
    assert forged != api_key
    with kit.make_client(server.api_base, api_key=forged) as sdk:
        with pytest.raises(openai.AuthenticationError) as raised:
            sdk.models.list()
    assert raised.value.code == "invalid_api_key"


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no-header"),
        pytest.param({"Authorization": ""}, id="empty"),
        pytest.param({"Authorization": "Bearer "}, id="bearer-only"),
        pytest.param({"Authorization": "Basic dXNlcjpwYXNz"}, id="basic"),
    ],
)
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param("GET", "/v1/models", None, id="models"),
        pytest.param("POST", "/v1/chat/completions", {"model": "dummy", "messages": HELLO}, id="chat"),
        pytest.param("POST", "/v1/embeddings", {"model": "dummy-embedding", "input": "x"}, id="embeddings"),
    ],
)
def test_missing_key_is_401(
    keyed: tuple[kit.NimbusServer, str], headers: dict[str, str], method: str, path: str, body: Any
) -> None:
    server, _ = keyed
    response = requests.request(method, f"{server.base_url}{path}", headers=headers, json=body, timeout=10)
    assert response.status_code == 401, response.text
    error = kit.error_envelope(response)
    assert error["code"] in AUTH_CODES, error
    assert response.headers.get("x-request-id")


def test_health_stays_open(keyed: tuple[kit.NimbusServer, str]) -> None:
    server, _ = keyed
    response = requests.get(f"{server.base_url}/health", timeout=10)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_auth_is_checked_before_the_body(keyed: tuple[kit.NimbusServer, str]) -> None:
    """Without a key, even a malformed body gets 401: nothing is parsed for strangers."""
    server, _ = keyed
    response = requests.post(
        f"{server.api_base}/chat/completions", data="{oops", headers={"content-type": "application/json"}, timeout=10
    )
    assert response.status_code == 401, response.text


def test_revoked_key_stops_working(keyed: tuple[kit.NimbusServer, str]) -> None:
    server, _ = keyed
    created = server.cli.create_key("sdk-tests", name="to-revoke")
    headers = {"Authorization": f"Bearer {created['api_key']}"}
    url = f"{server.api_base}/models"
    # A key created while the server runs works within about a second.
    wait_for_status(url, 200, headers=headers, timeout=5)
    # Served from the server's cache now; the CLI (another process) revokes it: the very next
    # request is refused, with no cache to wait out.
    assert requests.get(url, headers=headers, timeout=10).status_code == 200
    server.cli.revoke_key(created["key_id"])
    refused = requests.get(url, headers=headers, timeout=10)
    assert refused.status_code == 401, refused.text
    assert kit.error_envelope(refused)["code"] == "invalid_api_key"


def test_key_created_while_running_turns_auth_on(server_factory: Callable[..., kit.NimbusServer]) -> None:
    server = server_factory("nimbus-turn-on")
    url = f"{server.api_base}/models"
    assert requests.get(url, timeout=10).status_code == 200  # open: loopback, no keys yet
    created = server.cli.create_key("late", name="first")
    took = wait_for_status(url, 401, timeout=5)
    assert took < 3.0, f"the new key took {took:.1f}s to turn auth on"
    ok = requests.get(url, headers={"Authorization": f"Bearer {created['api_key']}"}, timeout=10)
    assert ok.status_code == 200, ok.text


def test_revoking_every_key_never_reopens(server_factory: Callable[..., kit.NimbusServer]) -> None:
    """Open only until the first key is ever created: revoking them all keeps keys required, the
    revoked key answers 401, and so does a restart on the same data directory."""
    server = server_factory("nimbus-revoke-all")
    url = f"{server.api_base}/models"
    assert requests.get(url, timeout=10).status_code == 200  # open: no key ever created
    created = server.cli.create_key("solo", name="only")
    headers = {"Authorization": f"Bearer {created['api_key']}"}
    wait_for_status(url, 401, timeout=5)
    assert requests.get(url, headers=headers, timeout=10).status_code == 200
    server.cli.revoke_key(created["key_id"])
    wait_for_status(url, 401, headers=headers, timeout=5)
    time.sleep(2.5)  # past every cache of the server (1 s locally)
    for _ in range(3):
        assert requests.get(url, timeout=10).status_code == 401, "no key: the server must not reopen"
        revoked = requests.get(url, headers=headers, timeout=10)
        assert revoked.status_code == 401, revoked.text
        assert kit.error_envelope(revoked)["code"] == "invalid_api_key"
        time.sleep(0.5)
    data_dir = server.data_dir
    server.stop()
    again = server_factory("nimbus-revoke-all-restarted", data_dir=data_dir)
    assert requests.get(f"{again.api_base}/models", timeout=10).status_code == 401
    assert requests.get(f"{again.api_base}/models", headers=headers, timeout=10).status_code == 401
    assert "API key required" in again.process.log_path.read_text(errors="replace")


def test_open_server_refuses_an_unknown_nimbus_key(nimbus_server: kit.NimbusServer) -> None:
    """Open mode ignores an SDK's placeholder but checks a key of ours: a revoked or foreign
    `nmb_` key is refused even while open."""
    foreign = f"nmb_{'0' * 32}_not-a-real-secret"
    response = requests.get(
        f"{nimbus_server.api_base}/models", headers={"Authorization": f"Bearer {foreign}"}, timeout=10
    )
    assert response.status_code == 401, response.text
    assert kit.error_envelope(response)["code"] == "invalid_api_key"


def test_open_mode_is_announced_and_auth_required_starts_closed(
    nimbus_server: kit.NimbusServer, server_factory: Callable[..., kit.NimbusServer]
) -> None:
    assert "auth: OPEN" in nimbus_server.process.log_path.read_text(errors="replace")
    closed = server_factory("nimbus-auth-required", extra_env={"NIMBUS_AUTH": "required"})
    assert requests.get(f"{closed.api_base}/models", timeout=10).status_code == 401
    assert "auth: OPEN" not in closed.process.log_path.read_text(errors="replace")


def test_open_mode_refuses_a_non_loopback_bind(tmp_path) -> None:
    cli = kit.NimbusCli(kit.clean_env({"NIMBUS_DATA_DIR": str(tmp_path / "data")}))
    result = cli.run("serve", "--auth", "open", "--bind", "0.0.0.0", "--port", "0", check=False)
    assert result.returncode != 0
    assert "loopback" in result.stderr


# --------------------------------------------------------------------------------------------
# The `nimbus keys` CLI
# --------------------------------------------------------------------------------------------


def test_keys_cli_create_list_revoke(tmp_path) -> None:
    cli = kit.NimbusCli(kit.clean_env({"NIMBUS_DATA_DIR": str(tmp_path / "data")}))
    result = cli.run("keys", "create", "--project", "proj-a", "--name", "ci")
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, result.stdout
    created = cli.create_key("proj-b")
    assert created["project"] == "proj-b"
    assert created["name"] is None
    assert created["api_key"].startswith("nmb_")
    assert created["key_id"]

    listed = cli.list_keys()
    by_id = {key["key_id"]: key for key in listed}
    assert created["key_id"] in by_id
    assert {key["project"] for key in listed} == {"proj-a", "proj-b"}
    assert all("api_key" not in key for key in listed), "list must never print secrets"
    assert created["api_key"] not in cli.run("keys", "list").stdout

    cli.revoke_key(created["key_id"])
    after = {key["key_id"]: key for key in cli.list_keys()}
    assert after[created["key_id"]].get("revoked_at")


def test_keys_create_rejects_a_bad_project(tmp_path) -> None:
    cli = kit.NimbusCli(kit.clean_env({"NIMBUS_DATA_DIR": str(tmp_path / "data")}))
    result = cli.run("keys", "create", "--project", "not a valid project!", check=False)
    assert result.returncode != 0
    assert "nmb_" not in result.stdout


def test_revoking_an_unknown_key_fails(tmp_path) -> None:
    cli = kit.NimbusCli(kit.clean_env({"NIMBUS_DATA_DIR": str(tmp_path / "data")}))
    result = cli.run("keys", "revoke", "0" * 32, check=False)
    assert result.returncode != 0
