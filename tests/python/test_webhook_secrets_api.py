"""`/v1/webhook_secrets` and `nimbus webhook-secrets` on the local server: a new secret is shown
once, listed masked; creating another starts a rotation (both live, the older one expiring in 24
hours); revoking removes one; projects never see each other's secrets.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import requests

import nimbus_testkit as kit

DAY = 86_400


@pytest.fixture(scope="module")
def keyed(server_factory: Callable[..., kit.NimbusServer]) -> tuple[kit.NimbusServer, dict[str, str]]:
    """A server with one key in each of two projects."""
    keys: dict[str, str] = {}

    def create(cli: kit.NimbusCli) -> None:
        for project in ("hooks-a", "hooks-b"):
            keys[project] = cli.create_key(project)["api_key"]

    server = server_factory("nimbus-webhook-secrets", before_start=create)
    return server, keys


class Api:
    def __init__(self, server: kit.NimbusServer, key: str):
        self.base = f"{server.api_base}/webhook_secrets"
        self.headers = {"Authorization": f"Bearer {key}"}

    def create(self) -> dict[str, Any]:
        response = requests.post(self.base, headers=self.headers, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()

    def list(self) -> list[dict[str, Any]]:
        response = requests.get(self.base, headers=self.headers, timeout=30)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["object"] == "list"
        return body["data"]

    def revoke(self, secret_id: str) -> requests.Response:
        return requests.delete(f"{self.base}/{secret_id}", headers=self.headers, timeout=30)


def check_not_found(response: requests.Response) -> None:
    assert response.status_code == 404, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "id", error


def test_create_list_rotate_revoke(keyed: tuple[kit.NimbusServer, dict[str, str]]) -> None:
    server, keys = keyed
    api = Api(server, keys["hooks-a"])
    first = api.create()
    assert set(first) == {"id", "object", "secret", "created_at"}, first
    assert first["object"] == "webhook_secret" and first["id"].startswith("wsec_")
    assert first["secret"].startswith("whsec_")
    assert abs(first["created_at"] - time.time()) < 120

    [listed] = api.list()
    assert listed["id"] == first["id"] and listed["expires_at"] is None
    assert listed["secret"].startswith("whsec_") and first["secret"] not in listed["secret"]
    assert len(listed["secret"]) < len(first["secret"])

    # Rotation: the older secret keeps signing for 24 hours.
    second = api.create()
    newest, older = api.list()
    assert (newest["id"], older["id"]) == (second["id"], first["id"])
    assert newest["expires_at"] is None
    assert abs(older["expires_at"] - (second["created_at"] + DAY)) <= 1, older

    revoked = api.revoke(second["id"])
    assert revoked.status_code == 200, revoked.text
    assert revoked.json() == {"id": second["id"], "object": "webhook_secret", "deleted": True}
    assert [s["id"] for s in api.list()] == [first["id"]]
    check_not_found(api.revoke(second["id"]))
    check_not_found(api.revoke("wsec_unknown"))


def test_projects_are_isolated(keyed: tuple[kit.NimbusServer, dict[str, str]]) -> None:
    server, keys = keyed
    a, b = Api(server, keys["hooks-a"]), Api(server, keys["hooks-b"])
    theirs = a.create()
    assert theirs["id"] not in [s["id"] for s in b.list()]
    check_not_found(b.revoke(theirs["id"]))
    assert theirs["id"] in [s["id"] for s in a.list()]
    # b's own secret does not rotate a's.
    b.create()
    assert next(s for s in a.list() if s["id"] == theirs["id"])["expires_at"] is None


def test_requests_without_a_key_are_refused(keyed: tuple[kit.NimbusServer, dict[str, str]]) -> None:
    server, _ = keyed
    response = requests.get(f"{server.api_base}/webhook_secrets", timeout=30)
    assert response.status_code == 401, response.text


def test_the_cli_manages_secrets_on_the_data_dir(tmp_path: Any) -> None:
    cli = kit.NimbusCli(kit.clean_env({"NIMBUS_DATA_DIR": str(tmp_path)}))

    def lines(*args: str) -> list[dict[str, Any]]:
        return kit.NimbusCli._json_lines(cli.run("webhook-secrets", *args).stdout)

    [created] = lines("create", "--project", "cli-project")
    assert created["object"] == "webhook_secret" and created["secret"].startswith("whsec_")
    [listed] = lines("list", "--project", "cli-project")
    assert listed["id"] == created["id"] and created["secret"] not in listed["secret"]
    assert lines("list", "--project", "another-project") == []
    [revoked] = lines("revoke", created["id"], "--project", "cli-project")
    assert revoked == {"id": created["id"], "object": "webhook_secret", "deleted": True}
    assert lines("list", "--project", "cli-project") == []
    failed = cli.run("webhook-secrets", "revoke", created["id"], "--project", "cli-project", check=False)
    assert failed.returncode != 0
