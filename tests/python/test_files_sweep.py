"""The janitor: `nimbus sweep --data-dir DIR --as-of T` runs the tasks due by T once, against the
data dir of a running server (SQLite is shared). Two hours ahead, an abandoned upload has expired
and lost its parts, a file created with `expires_after` 3600 s is gone with its bytes, and a direct
upload that never received its bytes is gone; everything else is untouched.

The server of this module also runs its own scheduled sweep every second
(NIMBUS_SCHEDULE_INTERVAL_SECS=1); on the real clock nothing of this is due, so it must not
remove anything either. `nimbus poll` runs the sweep as one task of a scheduler pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import requests

import nimbus_testkit as kit

PROJECT = "default"  # the open local server's project
TWO_HOURS = 2 * 3600


def project_dir(server: kit.NimbusServer) -> Path:
    return server.data_dir / "blobs" / "objects" / "projects" / PROJECT


def uploads_dir(server: kit.NimbusServer) -> Path:
    return server.data_dir / "blobs" / "objects" / "uploads" / PROJECT


def files_in(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()] if path.exists() else []


class Scenario:
    """What the module's server holds before the sweep, and what was observed then."""

    def __init__(self, server: kit.NimbusServer, sdk: openai.OpenAI):
        self.server = server
        self.sdk = sdk
        self.before: dict[str, Any] = {}
        # (a) an upload with one part, never completed
        self.upload = sdk.uploads.create(
            bytes=10, filename="abandoned.txt", mime_type="text/plain", purpose="assistants"
        )
        self.upload_part = sdk.uploads.parts.create(upload_id=self.upload.id, data=b"12345")
        # (b) a file that expires an hour after it was created
        self.expiring = sdk.files.create(
            file=("expiring.txt", b"short-lived"),
            purpose="assistants",
            expires_after={"anchor": "created_at", "seconds": 3600},
        )
        # (c) a direct upload whose bytes never arrive
        response = requests.post(
            f"{server.api_base}/direct_uploads",
            json={"filename": "never-sent.txt", "purpose": "user_data", "bytes": 5},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        self.never_sent = response.json()["file"]
        # Controls: none of these is due two hours from now.
        self.plain = sdk.files.create(file=("plain.txt", b"stays"), purpose="assistants")
        self.batch = sdk.files.create(file=("batch.jsonl", b"{}\n"), purpose="batch")
        self.day_long = sdk.files.create(
            file=("a-day.txt", b"a day"), purpose="user_data", expires_after={"anchor": "created_at", "seconds": 86_400}
        )
        done = sdk.uploads.create(bytes=4, filename="completed.txt", mime_type="text/plain", purpose="assistants")
        part = sdk.uploads.parts.create(upload_id=done.id, data=b"done")
        self.completed = sdk.uploads.complete(upload_id=done.id, part_ids=[part.id])
        landed = requests.post(
            f"{server.api_base}/direct_uploads",
            json={"filename": "landed.txt", "purpose": "user_data", "bytes": 6},
            timeout=30,
        ).json()
        assert requests.put(landed["upload_url"], data=b"landed", timeout=30).status_code == 200
        self.landed = landed["file"]
        self.survivors = [self.plain.id, self.batch.id, self.day_long.id, self.completed.file.id, self.landed["id"]]
        self.now = max(
            self.upload.created_at, self.expiring.created_at, self.never_sent["created_at"], self.landed["created_at"]
        )

    def sweep(self, as_of: int | None) -> dict[str, Any]:
        return self.server.cli.sweep(self.server.data_dir, as_of=as_of)


@pytest.fixture(scope="module")
def scenario(server_factory: Callable[..., kit.NimbusServer]) -> Iterator[Scenario]:
    server = server_factory("nimbus-files-sweep", extra_env={"NIMBUS_SCHEDULE_INTERVAL_SECS": "1"})
    with kit.make_client(server.api_base) as sdk:
        setup = Scenario(server, sdk)
        root = project_dir(server)
        setup.before = {
            "part_blobs": files_in(uploads_dir(server) / setup.upload.id),
            "expiring_blob": (root / "files" / setup.expiring.id).is_file(),
            "sweep_now": setup.sweep(None),
        }
        time.sleep(2.5)  # the server's own scheduled sweep runs at least twice meanwhile
        setup.before["after_scheduled_sweeps"] = {f.id: f.status for f in sdk.files.list()}
        setup.before["sweep_ahead"] = setup.sweep(setup.now + TWO_HOURS)
        yield setup


def test_before_the_sweep_everything_is_where_expected(scenario: Scenario) -> None:
    assert len(scenario.before["part_blobs"]) == 1, scenario.before["part_blobs"]
    assert scenario.before["expiring_blob"]


def test_sweep_now_finds_nothing_due(scenario: Scenario) -> None:
    assert scenario.before["sweep_now"] == {"tasks_run": 0, "tasks_failed": 0}


def test_scheduled_sweeps_on_the_real_clock_remove_nothing(scenario: Scenario) -> None:
    listed = scenario.before["after_scheduled_sweeps"]
    for file_id in [scenario.expiring.id, scenario.never_sent["id"], *scenario.survivors]:
        assert file_id in listed, f"{file_id} disappeared before it was due"
    assert listed[scenario.never_sent["id"]] == "uploaded"


def test_sweep_two_hours_ahead_runs_the_due_tasks(scenario: Scenario) -> None:
    report = scenario.before["sweep_ahead"]
    assert set(report) == {"tasks_run", "tasks_failed"}
    assert report["tasks_failed"] == 0, report
    assert report["tasks_run"] >= 3, report


def test_abandoned_upload_expired_and_lost_its_parts(scenario: Scenario) -> None:
    server, upload = scenario.server, scenario.upload
    body, content_type = kit.multipart_body([("data", ("blob", b"67890", "application/octet-stream"))])
    part = requests.post(
        f"{server.api_base}/uploads/{upload.id}/parts", data=body, headers={"Content-Type": content_type}, timeout=30
    )
    assert part.status_code == 400, part.text
    kit.error_envelope(part)
    complete = requests.post(
        f"{server.api_base}/uploads/{upload.id}/complete", json={"part_ids": [scenario.upload_part.id]}, timeout=30
    )
    assert complete.status_code == 400, complete.text
    assert "expired" in kit.error_envelope(complete)["message"]
    cancel = requests.post(f"{server.api_base}/uploads/{upload.id}/cancel", timeout=30)
    assert cancel.status_code == 400, cancel.text
    assert files_in(uploads_dir(server) / upload.id) == []


def test_expired_file_is_gone_with_its_bytes(scenario: Scenario) -> None:
    file_id = scenario.expiring.id
    for call in (scenario.sdk.files.retrieve, scenario.sdk.files.content, scenario.sdk.files.delete):
        with pytest.raises(openai.NotFoundError) as raised:
            call(file_id)
        assert kit.error_envelope(raised.value.response)["message"] == f"No such File object: {file_id}"
    assert not (project_dir(scenario.server) / "files" / file_id).exists()
    assert file_id not in {f.id for f in scenario.sdk.files.list()}


def test_direct_upload_never_sent_is_gone(scenario: Scenario) -> None:
    file_id = scenario.never_sent["id"]
    with pytest.raises(openai.NotFoundError):
        scenario.sdk.files.retrieve(file_id)
    assert file_id not in {f.id for f in scenario.sdk.files.list()}
    put = requests.put(f"{scenario.server.api_base}/files/{file_id}/content", data=b"late!", timeout=30)
    assert put.status_code == 404, put.text


def test_nothing_else_was_touched(scenario: Scenario) -> None:
    sdk = scenario.sdk
    expected = {
        scenario.plain.id: b"stays",
        scenario.batch.id: b"{}\n",
        scenario.day_long.id: b"a day",
        scenario.completed.file.id: b"done",
        scenario.landed["id"]: b"landed",
    }
    for file_id, content in expected.items():
        assert sdk.files.retrieve(file_id).status == "processed"
        assert sdk.files.content(file_id).read() == content
        assert (project_dir(scenario.server) / "files" / file_id).is_file()


def test_a_second_sweep_has_nothing_left_to_do(scenario: Scenario) -> None:
    assert scenario.sweep(scenario.now + TWO_HOURS) == {"tasks_run": 0, "tasks_failed": 0}


def test_sweep_of_an_empty_data_dir(tmp_path: Path) -> None:
    cli = kit.NimbusCli(kit.clean_env())
    assert cli.sweep(tmp_path / "fresh", as_of=int(time.time()) + 10 * 86_400) == {"tasks_run": 0, "tasks_failed": 0}


def test_poll_runs_every_scheduled_task_and_prints_the_report(tmp_path: Path) -> None:
    report = kit.NimbusCli(kit.clean_env()).poll(tmp_path)
    # The one round of due async work the pass read (it found nothing, so no second).
    assert report["tasks"]["async_requests"].pop("rounds") == 1, report
    assert report == {
        "tasks": {
            "files_sweep": {"tasks_run": 0, "tasks_failed": 0},
            "batches": {
                "active_batches": 0,
                "finalized": 0,
                "validations_requeued": 0,
                "provider_batches_polled": 0,
                "chunks_requeued": 0,
                "errors": 0,
            },
            "async_requests": {
                "due": 0,
                "expired": 0,
                "requeued": 0,
                "deliveries_queued": 0,
                "purged": 0,
                "errors": 0,
            },
            "webhook_deliveries": {"due": 0, "queued": 0, "purged": 0, "errors": 0},
            "experiments": {"updated": 0},
        },
        "errors": 0,
    }, report
