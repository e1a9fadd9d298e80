"""`nimbus batch` against a running local server (`nimbus serve`, what `make run` starts), in
non-terminal mode: stdout carries the answer, stderr the messages and plain progress lines.

The CLI's local checks are held to the server's own: the same bad file submitted straight through
the OpenAI SDK fails with the same codes, lines and messages."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
import requests

import nimbus_testkit as kit

SLOW_CONFIG = """
[batches]
lines_per_chunk = 4
line_concurrency = 1
checkpoint_interval_ms = 100

[models.dummy]
routing = ["dummy"]
[models.dummy.providers.dummy]
type = "dummy"

[models.slow]
routing = ["dummy"]
[models.slow.providers.dummy]
type = "dummy"
latency_ms = 120

[models.dummy-error]
routing = ["failing"]
[models.dummy-error.providers.failing]
type = "dummy"
fail_with_status = 400
"""


@pytest.fixture(scope="module", name="server")
def server_fixture(server_factory: Callable[..., kit.NimbusServer], tmp_path_factory: pytest.TempPathFactory) -> kit.NimbusServer:
    config = tmp_path_factory.mktemp("cli-config") / "nimbus.toml"
    config.write_text(SLOW_CONFIG)
    return server_factory("nimbus-batch-cli", config=config, extra_env=kit.BATCH_SERVER_ENV)


@pytest.fixture(scope="module", name="sdk")
def sdk_fixture(server: kit.NimbusServer) -> Any:
    with kit.make_client(server.api_base) as client:
        yield client


def cli(server: kit.NimbusServer | None, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`nimbus batch ARGS` with stdin, stdout and stderr not terminals."""
    environment = kit.clean_env(env)
    if server is not None:
        environment["OPENAI_BASE_URL"] = server.api_base
    return subprocess.run(  # noqa: S603
        [str(kit.binary("nimbus")), "batch", *args],
        env=environment,
        cwd=str(kit.REPO_ROOT),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def document(result: subprocess.CompletedProcess[str]) -> Any:
    """stdout as exactly one JSON document."""
    return json.loads(result.stdout)


def write_lines(path: Path, lines: list[dict[str, Any] | str]) -> Path:
    path.write_bytes(kit.jsonl(lines))
    return path


def file_ids(sdk: Any) -> set[str]:
    return {f.id for f in sdk.files.list()}


def test_the_make_run_server_with_its_default_config(nimbus_server: kit.NimbusServer, tmp_path: Path) -> None:
    """`make run`'s server: the default config, no key; the defaults of `--base-url` aside."""
    lines = [kit.chat_line(f"q{i}", f"question {i}") for i in range(5)] + [kit.embedding_line("e0", "text")]
    source = write_lines(tmp_path / "requests.jsonl", lines[:5])
    result = cli(nimbus_server, "submit", str(source), "--watch", "--interval", "0.2")
    assert result.returncode == 0, result.stderr
    batch_id = result.stdout.splitlines()[0]
    assert batch_id.startswith("batch_")
    assert f"{batch_id} completed: 5 of 5 requests completed, 0 failed" in result.stderr
    # Embeddings lines target their own endpoint.
    embeddings = write_lines(tmp_path / "embeddings.jsonl", lines[5:])
    result = cli(nimbus_server, "submit", str(embeddings), "--endpoint", "/v1/embeddings", "--watch", "--json")
    assert result.returncode == 0, result.stderr
    assert document(result)["request_counts"]["completed"] == 1


BAD_LINES: list[dict[str, Any] | str] = [
    kit.chat_line("a"),
    "not json",
    kit.chat_line("a"),
    {**kit.chat_line("b"), "url": "/v1/embeddings"},
    kit.chat_line("c", model="no-such-model"),
    {**kit.chat_line("d"), "body": {"model": "dummy", "messages": [], "stream": True}},
    {"custom_id": "e", "method": "POST", "url": "/v1/chat/completions"},
]


def test_a_bad_file_is_refused_like_the_server_does_and_nothing_is_uploaded(server: kit.NimbusServer, sdk: Any, tmp_path: Path) -> None:
    bad = write_lines(tmp_path / "bad.jsonl", BAD_LINES)
    before = file_ids(sdk)
    result = cli(server, "submit", str(bad), "--json")
    assert result.returncode == 1, result.stderr
    errors = document(result)["error"]["errors"]
    assert file_ids(sdk) == before, "nothing may be uploaded"
    # Compiler-style lines on stderr.
    assert f"{bad}:2: invalid_json_line: This line is not parseable as valid JSON." in result.stderr
    assert f"{bad}:5: model_not_found:" in result.stderr

    # The server, given the same file, finds the same problems with the same words.
    uploaded = sdk.files.create(file=bad.open("rb"), purpose="batch")
    batch = sdk.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    failed = kit.wait_for_batch(sdk, batch.id)
    assert failed.status == "failed"
    server_errors = [{"code": e.code, "line": e.line, "message": e.message, "param": e.param} for e in failed.errors.data]
    assert errors == server_errors
    assert [e["line"] for e in errors] == [2, 3, 4, 5, 6, 7]


@pytest.mark.parametrize(
    ("args", "param"),
    [
        (["--window", "2h"], "completion_window"),
        (["--endpoint", "/v1/completions"], "endpoint"),
        ([arg for i in range(17) for arg in ("--metadata", f"k{i}=v")], "metadata"),
    ],
)
def test_bad_parameters_get_the_servers_message_before_any_upload(
    server: kit.NimbusServer, sdk: Any, tmp_path: Path, args: list[str], param: str
) -> None:
    good = write_lines(tmp_path / "good.jsonl", [kit.chat_line("a")])
    before = file_ids(sdk)
    result = cli(server, "submit", str(good), "--json", *args)
    assert result.returncode == 1, result.stderr
    error = document(result)["error"]
    assert error["param"] == param
    assert file_ids(sdk) == before
    # The same parameters sent to the server directly.
    uploaded = sdk.files.create(file=good.open("rb"), purpose="batch")
    options = {"endpoint": "/v1/chat/completions", "completion_window": "24h", "metadata": None}
    if param == "completion_window":
        options["completion_window"] = "2h"
    elif param == "endpoint":
        options["endpoint"] = "/v1/completions"
    else:
        options["metadata"] = {f"k{i}": "v" for i in range(17)}
    response = requests.post(f"{server.api_base}/batches", json={"input_file_id": uploaded.id, **options}, timeout=10)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == error["message"]


def test_a_file_that_is_not_jsonl_is_refused_with_the_servers_message(server: kit.NimbusServer, tmp_path: Path) -> None:
    wrong = write_lines(tmp_path / "requests.json", [kit.chat_line("a")])
    result = cli(server, "submit", str(wrong))
    assert result.returncode == 1
    assert "Invalid file format for Batch API. Must be .jsonl" in result.stderr
    assert result.stdout == ""


def test_submit_watch_and_results_in_input_order(server: kit.NimbusServer, sdk: Any, tmp_path: Path) -> None:
    lines = [kit.chat_line(f"req-{i:02d}", f"question {i}", model="slow") for i in range(24)]
    lines[5] = kit.chat_line("req-05", "this one fails", model="dummy-error")
    source = write_lines(tmp_path / "in.jsonl", lines)
    result = cli(
        server, "submit", str(source), "--metadata", "team=search", "--metadata", "run=7", "--watch", "--interval", "0.2", "--json"
    )
    assert result.returncode == 0, result.stderr
    batch = document(result)
    assert batch["status"] == "completed"
    assert batch["request_counts"] == {"total": 24, "completed": 23, "failed": 1}
    assert batch["metadata"] == {"team": "search", "run": "7"}
    # Plain progress lines on stderr, one per change, from in_progress to completed.
    progress = [line for line in result.stderr.splitlines() if batch["id"] in line and "/24 completed" in line]
    assert len(progress) >= 3, result.stderr
    assert " in_progress " in progress[0] and " completed 23/24 " not in progress[0]
    assert progress[-1].split()[2:4] == ["completed", "24/24"]

    out, err = tmp_path / "out.jsonl", tmp_path / "err.jsonl"
    fetched = cli(server, "results", batch["id"], "-o", str(out), "--errors", str(err), "--in-input-order", str(source), "--json")
    assert fetched.returncode == 0, fetched.stderr
    assert document(fetched)["id"] == batch["id"]
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["custom_id"] for r in results] == [f"req-{i:02d}" for i in range(24) if i != 5]
    failures = [json.loads(line) for line in err.read_text().splitlines()]
    assert [f["custom_id"] for f in failures] == ["req-05"]
    assert failures[0]["response"]["status_code"] == 400
    assert not list(tmp_path.glob("*.part")) and not list(tmp_path.glob("*.unordered"))

    # Without reordering: the same lines, as the server wrote them.
    plain = tmp_path / "plain.jsonl"
    assert cli(server, "results", batch["id"], "-o", str(plain)).returncode == 0
    assert sorted(plain.read_text().splitlines()) == sorted(out.read_text().splitlines())


def test_a_large_file_goes_up_in_parts_byte_for_byte(server: kit.NimbusServer, sdk: Any, tmp_path: Path) -> None:
    lines = [kit.chat_line(f"big-{i}", "x" * 900 + str(i)) for i in range(400)]
    source = write_lines(tmp_path / "big.jsonl", lines)
    size = source.stat().st_size
    result = cli(server, "submit", str(source), "--part-size", "64KiB", "--json")
    assert result.returncode == 0, result.stderr
    parts = -(-size // (64 * 1024))
    assert f"in {parts} parts" in result.stderr
    batch = document(result)
    uploaded = sdk.files.retrieve(batch["input_file_id"])
    assert uploaded.bytes == size and uploaded.filename == "big.jsonl"
    assert sdk.files.content(uploaded.id).read() == source.read_bytes()
    assert kit.wait_for_batch(sdk, batch["id"]).status == "completed"


def test_an_idempotency_key_makes_a_repeated_submit_return_the_same_batch(server: kit.NimbusServer, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "once.jsonl", [kit.chat_line("a"), kit.chat_line("b")])
    first = cli(server, "submit", str(source), "--idempotency-key", "cli-test-once")
    again = cli(server, "submit", str(source), "--idempotency-key", "cli-test-once")
    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    # Without --json, stdout is only the id.
    assert first.stdout.strip().startswith("batch_") and first.stdout.count("\n") == 1
    assert again.stdout == first.stdout
    other = cli(server, "submit", str(source))
    assert other.stdout != first.stdout


def test_a_repeated_large_submit_with_a_key_returns_the_same_batch_without_uploading_again(
    server: kit.NimbusServer, sdk: Any, tmp_path: Path
) -> None:
    """Issue #26 F20: the upload in parts carries keys derived from --idempotency-key, so a repeat
    finds the completed upload (and its file) instead of uploading again and failing
    `idempotency_key_reused` on the batch."""
    lines = [kit.chat_line(f"twice-{i}", "y" * 900 + str(i)) for i in range(200)]
    source = write_lines(tmp_path / "twice.jsonl", lines)
    key = f"cli-large-{uuid.uuid4().hex}"
    first = cli(server, "submit", str(source), "--part-size", "64KiB", "--idempotency-key", key, "--json")
    assert first.returncode == 0, first.stderr
    files_after_first = file_ids(sdk)
    again = cli(server, "submit", str(source), "--part-size", "64KiB", "--idempotency-key", key, "--json")
    assert again.returncode == 0, again.stderr
    assert document(again)["id"] == document(first)["id"]
    assert document(again)["input_file_id"] == document(first)["input_file_id"]
    assert file_ids(sdk) == files_after_first, "the repeat must not upload the file again"
    # Another file under the same key is the batch API's error, as for any reused key.
    changed = write_lines(tmp_path / "twice.jsonl", lines[:150])
    other = cli(server, "submit", str(changed), "--part-size", "64KiB", "--idempotency-key", key, "--json")
    assert other.returncode == 1, other.stderr
    assert document(other)["error"]["code"] == "idempotency_key_reused", other.stdout


def test_watch_exit_codes_follow_the_final_status(server: kit.NimbusServer, sdk: Any, tmp_path: Path) -> None:
    # failed: an input the server refuses (created without the CLI's checks).
    bad = sdk.files.create(file=("bad.jsonl", kit.jsonl(["{broken"])), purpose="batch")
    failed = sdk.batches.create(input_file_id=bad.id, endpoint="/v1/chat/completions", completion_window="24h")
    result = cli(server, "watch", failed.id, "--interval", "0.2")
    assert result.returncode == 3, result.stderr
    assert result.stdout.strip() == "failed"
    assert "line 1: invalid_json_line" in result.stderr

    # expired: a window shorter than the work (the test server allows second-long windows).
    slow = sdk.files.create(file=("slow.jsonl", kit.jsonl([kit.chat_line(f"s{i}", model="slow") for i in range(200)])), purpose="batch")
    expiring = sdk.batches.create(input_file_id=slow.id, endpoint="/v1/chat/completions", completion_window="2s")
    result = cli(server, "watch", expiring.id, "--interval", "0.2", "--json")
    assert result.returncode == 4, result.stderr
    assert document(result)["status"] == "expired"

    # cancelled: `nimbus batch cancel`, then watch to the end.
    source = write_lines(tmp_path / "cancel.jsonl", [kit.chat_line(f"c{i}", model="slow") for i in range(200)])
    batch_id = cli(server, "submit", str(source)).stdout.strip()
    kit.wait_for_batch(sdk, batch_id, until=lambda b: b.status == "in_progress", timeout=15)
    cancelled = cli(server, "cancel", batch_id, "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert document(cancelled)["status"] in {"cancelling", "cancelled"}
    result = cli(server, "watch", batch_id, "--interval", "0.2")
    assert result.returncode == 5, result.stderr
    assert result.stdout.strip() == "cancelled"
    # Requests the cancel left are "not run", not failed, and the list does not show it as done.
    ended = sdk.batches.retrieve(batch_id)
    not_run = ended.request_counts.model_extra.get("not_run", 0)
    assert not_run > 0 and ended.request_counts.completed + ended.request_counts.failed == 200, ended.request_counts.to_dict()
    assert f", {not_run} not run" in result.stderr and f"{ended.request_counts.failed - not_run} failed" in result.stderr
    row = next(r for r in cli(server, "list", "--limit", "20").stdout.splitlines() if r.startswith(batch_id))
    cells = row.split()
    assert cells[2] == f"{200 - not_run}/200" and cells[4] == str(not_run), row
    # Cancelling a batch that failed: the server's 409, exit 1.
    again = cli(server, "cancel", failed.id, "--json")
    assert again.returncode == 1
    assert document(again)["error"]["status"] == 409
    assert "Cannot cancel a batch with status 'failed'" in again.stderr


def test_results_wait_for_the_batch_to_end(server: kit.NimbusServer, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "running.jsonl", [kit.chat_line(f"r{i}", model="slow") for i in range(100)])
    batch_id = cli(server, "submit", str(source)).stdout.strip()
    result = cli(server, "results", batch_id, "-o", str(tmp_path / "out.jsonl"), "--json")
    assert result.returncode == 1
    assert document(result)["error"]["type"] == "batch_not_ended"
    assert not (tmp_path / "out.jsonl").exists()
    cli(server, "cancel", batch_id)


def test_list_pages_through_every_batch(server: kit.NimbusServer, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "listed.jsonl", [kit.chat_line("a")])
    created = [cli(server, "submit", str(source)).stdout.strip() for _ in range(3)]
    first_page = document(cli(server, "list", "--limit", "2", "--json"))
    assert first_page["object"] == "list" and len(first_page["data"]) == 2 and first_page["has_more"] is True
    everything = document(cli(server, "list", "--limit", "2", "--all", "--json"))
    ids = [b["id"] for b in everything["data"]]
    assert len(ids) == len(set(ids)) and set(created) <= set(ids)
    assert everything["has_more"] is False
    table = cli(server, "list", "--limit", "3")
    assert table.returncode == 0
    rows = table.stdout.splitlines()
    assert rows[0].split()[:4] == ["ID", "STATUS", "DONE/TOTAL", "FAILED"]
    assert [row.split()[0] for row in rows[1:]] == list(reversed(created))
    assert "more: nimbus batch list --after" in table.stderr


def test_api_key_from_the_flag_or_the_environment(
    keyed_server: tuple[kit.NimbusServer, dict[str, Any]], tmp_path: Path
) -> None:
    server, created = keyed_server
    refused = cli(server, "list", "--json")
    assert refused.returncode == 1
    assert document(refused)["error"]["status"] == 401
    assert cli(server, "list", "--api-key", created["api_key"]).returncode == 0
    assert cli(server, "list", env={"OPENAI_API_KEY": created["api_key"]}).returncode == 0


def test_an_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    port = kit.free_port()
    result = cli(None, "list", "--base-url", f"http://127.0.0.1:{port}/v1", "--json")
    assert result.returncode == 1
    error = document(result)["error"]
    assert error["type"] == "connection_error"
    assert f"127.0.0.1:{port}" in error["message"]


# --------------------------------------------------------------------------------------------
# In a real terminal: tmux runs the CLI on a pseudo-terminal, and its screen is read back.
# --------------------------------------------------------------------------------------------


class Terminal:
    """A tmux server of its own with one window running `command`."""

    def __init__(self, command: str, env: dict[str, str], *, width: int = 150, height: int = 12):
        tmux = shutil.which("tmux")
        assert tmux, "tmux is needed for the terminal tests (`make test-deps` installs it)"
        self.base = [tmux, "-L", f"nimbus-test-{uuid.uuid4().hex[:8]}"]
        subprocess.run(  # noqa: S603
            [*self.base, "-f", "/dev/null", "new-session", "-d", "-x", str(width), "-y", str(height), command],
            env={**env, "TERM": "xterm-256color"},
            check=True,
            timeout=10,
        )

    def screen(self) -> str:
        return subprocess.run(  # noqa: S603
            [*self.base, "capture-pane", "-p"], capture_output=True, text=True, check=True, timeout=10
        ).stdout

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.base, "send-keys", *keys], check=True, timeout=10)  # noqa: S603

    def wait_for(self, predicate: Callable[[str], bool], what: str, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if predicate(screen):
                return screen
            time.sleep(0.1)
        raise AssertionError(f"the screen never showed {what}:\n{screen}")

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], check=False, timeout=10)  # noqa: S603


LIVE_BAR = re.compile(
    r"in_progress \[\d\d:\d\d:\d\d\] \[=*>? *\] (\d+)/(\d+) completed (\d+) · failed 0 · [\d.]+/s · ETA \d+"
)


def terminal_command(server: kit.NimbusServer, *args: str) -> tuple[str, dict[str, str]]:
    env = kit.clean_env({"OPENAI_BASE_URL": server.api_base})
    line = " ".join([shlex.quote(str(kit.binary("nimbus"))), "batch", *map(shlex.quote, args)])
    # The exit code stays on the screen; the window stays open to be read.
    return f"{line}; echo EXIT=$?; sleep 600", env


def test_submit_watch_draws_a_live_bar_in_a_terminal(server: kit.NimbusServer, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "live.jsonl", [kit.chat_line(f"t{i}", model="slow") for i in range(120)])
    command, env = terminal_command(server, "submit", str(source), "--watch", "--interval", "0.25")
    terminal = Terminal(command, env)
    try:
        # A frame mid-way: status, elapsed time, a partly filled bar, counts, rate and ETA.
        frame = terminal.wait_for(
            lambda s: any(0 < int(m.group(1)) < 120 and m.group(2) == "120" for m in LIVE_BAR.finditer(s)),
            "a partly filled live bar",
        )
        assert "created batch_" in frame
        final = terminal.wait_for(lambda s: "EXIT=" in s, "the exit code")
        assert "EXIT=0" in final, final
        assert "120/120 completed 120 · failed 0" in final, final
        assert re.search(r"batch_\w+ completed: 120 of 120 requests completed, 0 failed", final), final
        # One bar, redrawn in place: no stack of stale frames on the screen.
        assert len(re.findall(r"\[\d\d:\d\d:\d\d\]", final)) == 1, final
    finally:
        terminal.close()


def test_ctrl_c_stops_watching_and_leaves_the_batch_running(server: kit.NimbusServer, sdk: Any, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "long.jsonl", [kit.chat_line(f"l{i}", model="slow") for i in range(150)])
    batch_id = cli(server, "submit", str(source)).stdout.strip()
    command, env = terminal_command(server, "watch", batch_id, "--interval", "0.25")
    terminal = Terminal(command, env)
    try:
        terminal.wait_for(lambda s: LIVE_BAR.search(s) is not None, "the live bar")
        terminal.keys("C-c")
        screen = terminal.wait_for(lambda s: "EXIT=" in s, "the exit code after Ctrl-C")
        assert "EXIT=130" in screen, screen
        assert re.search(rf"stopped watching at \d+/150 \(in_progress\); batch {batch_id} goes on", screen), screen
        # The bar's last frame stays, once: not redrawn below the echoed ^C.
        assert len(re.findall(r"\[\d\d:\d\d:\d\d\]", screen)) == 1, screen
    finally:
        terminal.close()
    status = sdk.batches.retrieve(batch_id).status
    assert status in {"in_progress", "finalizing", "completed"}, status
    assert kit.wait_for_batch(sdk, batch_id).status == "completed"
