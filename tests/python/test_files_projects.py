"""Files and uploads are scoped to the API key's project: another project's ids answer exactly like
ids that do not exist, its files never show in a listing, and its bytes live under its own prefix.

One server whose data dir holds a key for project `alpha` and one for project `beta`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
import requests

import nimbus_testkit as kit

MISSING_FILE = "file-00000000000070008000000000000000"


@pytest.fixture(scope="module")
def two_projects(server_factory: Callable[..., kit.NimbusServer]) -> tuple[kit.NimbusServer, str, str]:
    keys: dict[str, str] = {}

    def create(cli: kit.NimbusCli) -> None:
        keys["alpha"] = cli.create_key("alpha", name="files-alpha")["api_key"]
        keys["beta"] = cli.create_key("beta", name="files-beta")["api_key"]

    server = server_factory("nimbus-files-projects", before_start=create)
    return server, keys["alpha"], keys["beta"]


@pytest.fixture(scope="module")
def alpha(two_projects) -> Iterator[openai.OpenAI]:
    server, key, _ = two_projects
    with kit.make_client(server.api_base, api_key=key) as sdk:
        yield sdk


@pytest.fixture(scope="module")
def beta(two_projects) -> Iterator[openai.OpenAI]:
    server, _, key = two_projects
    with kit.make_client(server.api_base, api_key=key) as sdk:
        yield sdk


@pytest.fixture(scope="module")
def alpha_file(alpha: openai.OpenAI) -> Any:
    return alpha.files.create(file=("alpha-secret.txt", b"alpha's bytes"), purpose="assistants")


def raw(server: kit.NimbusServer, key: str, method: str, path: str, **kwargs: Any) -> requests.Response:
    return requests.request(
        method, f"{server.base_url}{path}", headers={"Authorization": f"Bearer {key}"}, timeout=30, **kwargs
    )


def not_found_error(response: requests.Response, missing_id: str) -> dict[str, Any]:
    """The error of a 404, with the id in its message replaced by `<id>` so two can be compared."""
    assert response.status_code == 404, f"HTTP {response.status_code}: {response.text}"
    error = kit.error_envelope(response)
    return {**error, "message": error["message"].replace(missing_id, "<id>")}


@pytest.mark.parametrize(
    ("method", "suffix"), [("GET", ""), ("GET", "/content"), ("DELETE", "")], ids=["retrieve", "content", "delete"]
)
def test_other_projects_file_is_404_like_a_missing_one(two_projects, alpha_file, method: str, suffix: str) -> None:
    server, _, beta_key = two_projects
    foreign = raw(server, beta_key, method, f"/v1/files/{alpha_file.id}{suffix}")
    missing = raw(server, beta_key, method, f"/v1/files/{MISSING_FILE}{suffix}")
    assert foreign.json()["error"]["message"] == f"No such File object: {alpha_file.id}"
    assert not_found_error(foreign, alpha_file.id) == not_found_error(missing, MISSING_FILE)
    assert foreign.json()["error"]["param"] == "id"


def test_other_projects_file_survives_their_delete(
    two_projects, alpha: openai.OpenAI, beta: openai.OpenAI, alpha_file
) -> None:
    with pytest.raises(openai.NotFoundError):
        beta.files.delete(alpha_file.id)
    assert alpha.files.retrieve(alpha_file.id) == alpha_file
    assert alpha.files.content(alpha_file.id).read() == b"alpha's bytes"


def test_listings_are_per_project(alpha: openai.OpenAI, beta: openai.OpenAI, alpha_file) -> None:
    beta_file = beta.files.create(file=("beta.jsonl", b"{}\n"), purpose="batch")
    alpha_ids = {f.id for f in alpha.files.list()}
    beta_ids = {f.id for f in beta.files.list()}
    assert alpha_file.id in alpha_ids and alpha_file.id not in beta_ids
    assert beta_file.id in beta_ids and beta_file.id not in alpha_ids
    assert alpha_file.id not in {f.id for f in beta.files.list(purpose="assistants")}


def test_after_cursor_from_another_project_leaks_nothing(alpha: openai.OpenAI, beta: openai.OpenAI, alpha_file) -> None:
    beta_ids = {f.id for f in beta.files.list()}
    try:
        page = beta.files.list(after=alpha_file.id, order="asc")
    except openai.BadRequestError:
        return
    assert {f.id for f in page.data} <= beta_ids


def test_bytes_live_under_the_projects_prefix(two_projects, alpha_file) -> None:
    server, _, _ = two_projects
    projects = server.data_dir / "blobs" / "objects" / "projects"
    assert (projects / "alpha" / "files" / alpha_file.id).is_file()
    assert not (projects / "beta" / "files" / alpha_file.id).exists()


def test_other_projects_upload_is_404(two_projects, alpha: openai.OpenAI) -> None:
    server, _, beta_key = two_projects
    upload = alpha.uploads.create(bytes=3, filename="alpha-upload.txt", mime_type="text/plain", purpose="assistants")
    part = alpha.uploads.parts.create(upload_id=upload.id, data=b"abc")
    body, content_type = kit.multipart_body([("data", ("blob", b"abc", "application/octet-stream"))])
    calls = [
        ("POST", f"/v1/uploads/{upload.id}/parts", {"data": body, "headers": {"Content-Type": content_type}}),
        ("POST", f"/v1/uploads/{upload.id}/complete", {"json": {"part_ids": [part.id]}}),
        ("POST", f"/v1/uploads/{upload.id}/cancel", {}),
    ]
    for method, path, kwargs in calls:
        headers = {"Authorization": f"Bearer {beta_key}", **kwargs.pop("headers", {})}
        response = requests.request(method, f"{server.base_url}{path}", headers=headers, timeout=30, **kwargs)
        assert response.status_code == 404, f"{path}: HTTP {response.status_code}: {response.text}"
        assert kit.error_envelope(response)["message"] == f"No such Upload object: {upload.id}"
    # Untouched for its owner.
    completed = alpha.uploads.complete(upload_id=upload.id, part_ids=[part.id])
    assert completed.status == "completed"
    assert alpha.files.content(completed.file.id).read() == b"abc"


def test_other_projects_direct_upload_cannot_be_written(two_projects, alpha: openai.OpenAI) -> None:
    server, alpha_key, beta_key = two_projects
    request = {"filename": "direct.txt", "purpose": "user_data", "bytes": 4}
    created = raw(server, alpha_key, "POST", "/v1/direct_uploads", json=request)
    assert created.status_code == 200, created.text
    file_id = created.json()["file"]["id"]
    response = raw(server, beta_key, "PUT", f"/v1/files/{file_id}/content", data=b"evil")
    assert response.status_code == 404, response.text
    assert alpha.files.retrieve(file_id).status == "uploaded"
    response = raw(server, alpha_key, "PUT", f"/v1/files/{file_id}/content", data=b"good")
    assert response.status_code == 200, response.text
    assert alpha.files.content(file_id).read() == b"good"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/files"),
        ("POST", "/v1/files"),
        ("GET", f"/v1/files/{MISSING_FILE}"),
        ("GET", f"/v1/files/{MISSING_FILE}/content"),
        ("PUT", f"/v1/files/{MISSING_FILE}/content"),
        ("DELETE", f"/v1/files/{MISSING_FILE}"),
        ("POST", "/v1/uploads"),
        ("POST", "/v1/uploads/upload_x/parts"),
        ("POST", "/v1/uploads/upload_x/complete"),
        ("POST", "/v1/uploads/upload_x/cancel"),
        ("POST", "/v1/direct_uploads"),
    ],
)
def test_files_routes_need_a_key(two_projects, method: str, path: str) -> None:
    server, _, _ = two_projects
    response = requests.request(method, f"{server.base_url}{path}", timeout=30)
    assert response.status_code == 401, f"{method} {path}: HTTP {response.status_code}: {response.text}"
    assert kit.error_envelope(response)["code"] in {"invalid_api_key", "missing_api_key"}
