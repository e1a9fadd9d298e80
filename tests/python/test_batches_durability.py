"""Batches on the local server survive what happens around them, seen through the real OpenAI SDK:

- the input file deleted while its batch runs: gone from the files API at once, yet every line
  runs, and the bytes go when the batch ends;
- `kill -9` of `nimbus serve` mid-batch: a server restarted on the same data directory takes
  over at once (progress within seconds, not after the dead process's leases expire) and every
  custom_id ends up exactly once; temporary files of interrupted blob writes are removed;
- a second server on a data directory in use refuses to start, with a clear message.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import openai
import pytest

import nimbus_testkit as kit

# A slow model and small chunks saved often, so a batch is mid-way for a few seconds.
SLOW_CONFIG = """
[models.slow]
routing = ["dummy"]

[models.slow.providers.dummy]
type = "dummy"
latency_ms = 500

[batches]
lines_per_chunk = 6
line_concurrency = 2
checkpoint_interval_ms = 100
"""


def done_count(batch: object) -> int:
    counts = batch.request_counts  # type: ignore[attr-defined]
    return counts.completed + counts.failed


def input_blob(server: kit.NimbusServer, file_id: str) -> Path:
    return server.data_dir / "blobs" / "objects" / "projects" / "default" / "files" / file_id


def check_every_custom_id_once(sdk: openai.OpenAI, batch: object, custom_ids: list[str]) -> None:
    output, errors = kit.batch_results(sdk, batch)
    assert not errors, errors[:3]
    seen = Counter(line["custom_id"] for line in output)
    assert seen == Counter(custom_ids), f"not exactly once: {[(c, n) for c, n in seen.items() if n != 1]}"


def test_deleting_the_input_of_a_running_batch_keeps_it_running(nimbus_server: kit.NimbusServer) -> None:
    custom_ids = [f"req-{i}" for i in range(6)]
    with kit.make_client(nimbus_server.api_base) as sdk:
        input_file = kit.upload_batch_input(sdk, [kit.chat_line(c, model="dummy-slow") for c in custom_ids])
        batch = sdk.batches.create(
            input_file_id=input_file.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        deleted = sdk.files.delete(input_file.id)
        assert deleted.deleted is True
        with pytest.raises(openai.NotFoundError):
            sdk.files.retrieve(input_file.id)
        assert input_file.id not in {f.id for f in sdk.files.list(purpose="batch")}

        done = kit.wait_for_batch(sdk, batch.id, timeout=60)
        assert done.status == "completed", done
        assert done.request_counts.completed == len(custom_ids), done
        check_every_custom_id_once(sdk, done, custom_ids)
        kit.wait_until(
            lambda: not input_blob(nimbus_server, input_file.id).exists(),
            timeout=10,
            what="the deleted input's bytes to go with the batch",
        )


def test_a_killed_server_resumes_its_batch_within_seconds_after_a_restart(
    server_factory: Callable[..., kit.NimbusServer], tmp_path: Path
) -> None:
    config = tmp_path / "slow.toml"
    config.write_text(SLOW_CONFIG)
    data_dir = tmp_path / "data"
    first = server_factory("nimbus-killed", data_dir=data_dir, config=config)
    custom_ids = [f"req-{i:03}" for i in range(48)]
    with kit.make_client(first.api_base) as sdk:
        input_file = kit.upload_batch_input(sdk, [kit.chat_line(c, model="slow") for c in custom_ids])
        batch = sdk.batches.create(
            input_file_id=input_file.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        running = kit.wait_for_batch(sdk, batch.id, until=lambda b: done_count(b) >= 4, timeout=30)
        assert running.status == "in_progress", running
        assert done_count(running) < len(custom_ids) // 2, "the batch should be mid-way"

    os.killpg(first.process.pid, signal.SIGKILL)
    first.process.proc.wait(timeout=10)
    first.stop()
    # A blob write the kill interrupted leaves its temporary file behind.
    leftover = data_dir / "blobs" / ".tmp" / "interrupted-write"
    leftover.write_bytes(b"partial")

    second = server_factory("nimbus-restarted", data_dir=data_dir, config=config)
    assert not leftover.exists(), "the restarted server removes temporary files of interrupted writes"
    with kit.make_client(second.api_base) as sdk:
        resumed = sdk.batches.retrieve(batch.id)
        assert resumed.status == "in_progress", resumed
        baseline = done_count(resumed)
        kit.wait_for_batch(
            sdk,
            batch.id,
            until=lambda b: done_count(b) > baseline or b.status in kit.BATCH_TERMINAL_STATUSES,
            timeout=10,
        )
        done = kit.wait_for_batch(sdk, batch.id, timeout=60)
        assert done.status == "completed", done
        assert done.request_counts.total == done.request_counts.completed == len(custom_ids), done
        check_every_custom_id_once(sdk, done, custom_ids)


def test_a_second_server_on_a_data_dir_in_use_refuses_to_start(
    server_factory: Callable[..., kit.NimbusServer], tmp_path: Path
) -> None:
    data_dir = tmp_path / "shared-data"
    running = server_factory("nimbus-owner", data_dir=data_dir)
    env = kit.clean_env(
        {"PORT": str(kit.free_port()), "NIMBUS_DATA_DIR": str(data_dir), "NIMBUS_CONFIG": str(kit.DEFAULT_CONFIG)}
    )
    second = subprocess.run(  # noqa: S603 - the harness's own binary
        [str(kit.binary("nimbus")), "serve"],
        env=env,
        cwd=str(kit.REPO_ROOT),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert second.returncode != 0, second
    assert "already uses the data directory" in second.stderr, second.stderr
    assert f"pid {running.process.pid}" in second.stderr, second.stderr
    # The first server is unaffected.
    with kit.make_client(running.api_base) as sdk:
        assert sdk.models.list().data
