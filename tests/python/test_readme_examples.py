"""The README's examples (and those of the docs/ pages it links to) run as written.

Every ```bash / ```sh / ```python block of README.md and docs/*.md (but the design notes,
docs/architecture.md, and the measurements, docs/benchmarks.md) is preceded by a marker line:

    <!-- example: NAME -->                    run it, in document order
    <!-- example: NAME skip: REASON -->       shown, not run here (e.g. it needs AWS); REASON required

A block with neither fails `test_every_example_is_marked`, so a new example cannot escape.

Each document runs (twice: see `test_examples_run_as_written`) against its own fresh `nimbus serve` (open, loopback, the default config, the
server's data dir as `NIMBUS_DATA_DIR`) from its own empty working directory, its blocks in order:
bash blocks with `bash -eu -o pipefail` (and `curl` failing on an HTTP error status), python blocks in one Python process per document that keeps
its variables from block to block (a reader's session). The placeholders the README documents are
set: `NIMBUS_URL` (the server's root), `NIMBUS_KEY` (a placeholder: the server is open),
`OPENAI_BASE_URL` / `OPENAI_API_KEY` (for `nimbus batch`); `http://127.0.0.1:3000` and
`localhost:3000` (what `make run` serves) are replaced by the server's address; `nimbus` on PATH is
the built binary (what `make install` puts there). A block whose output mentions a deprecation
(a Python DeprecationWarning, or the `tensorzero` client's own warning) fails too.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import nimbus_testkit as kit

RUN_LANGUAGES = {"bash", "sh", "python"}
NOT_EXAMPLES = {"architecture.md", "benchmarks.md"}
DOCUMENTS = [kit.REPO_ROOT / "README.md"] + sorted(
    p for p in (kit.REPO_ROOT / "docs").glob("*.md") if p.name not in NOT_EXAMPLES
)
MARKER = re.compile(r"^<!--\s*example:\s*(?P<name>[A-Za-z0-9_.-]+)(?:\s+skip:\s*(?P<reason>.*?))?\s*-->\s*$")
FENCE = re.compile(r"^```(?P<lang>[A-Za-z0-9_+-]*)\s*$")
BLOCK_TIMEOUT_S = 180
# A reader sees a 4xx/5xx answer as a failure; `curl -s` alone would exit 0 on it.
CURL_FAILS_ON_HTTP_ERRORS = (
    'curl() { command curl --fail-with-body "$@" || { status=$?; '
    'echo "curl $* exited $status (22: the server answered an HTTP error)" >&2; return $status; }; }\n'
)


@dataclass
class Block:
    document: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    name: str | None
    skip: str | None  # the reason, for a block marked as not run

    @property
    def where(self) -> str:
        return f"{self.document.relative_to(kit.REPO_ROOT)}:{self.line}"


def blocks_of(document: Path) -> list[Block]:
    lines = document.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        start = i
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        marker = MARKER.match(lines[start - 1]) if start > 0 else None
        found.append(
            Block(
                document=document,
                line=start + 1,
                lang=fence["lang"].lower(),
                code="\n".join(lines[start + 1 : end]) + "\n",
                name=marker["name"] if marker else None,
                skip=(marker["reason"] if marker and marker["reason"] is not None else None),
            )
        )
        i = end + 1
    return found


def test_every_example_is_marked() -> None:
    """Every runnable-language block says whether it runs here, and a skipped one says why."""
    problems: list[str] = []
    for document in DOCUMENTS:
        names: set[str] = set()
        for block in blocks_of(document):
            if block.lang not in RUN_LANGUAGES:
                continue
            if block.name is None:
                problems.append(
                    f"{block.where}: ```{block.lang} block without a marker line before it "
                    "(<!-- example: NAME --> or <!-- example: NAME skip: REASON -->)"
                )
                continue
            if block.skip is not None and not block.skip.strip():
                problems.append(f"{block.where}: example `{block.name}` is skipped without a reason")
            if block.name in names:
                problems.append(f"{block.where}: example name `{block.name}` is used twice in the document")
            names.add(block.name)
    assert not problems, "\n".join(problems)


def test_the_readme_has_examples_to_run() -> None:
    runnable = runnable_blocks(kit.REPO_ROOT / "README.md")
    assert len(runnable) >= 10, [b.name for b in runnable]


def test_the_sdk_versions_the_readme_names_are_the_pinned_ones() -> None:
    """The examples run with the pinned SDKs; the README's `pip install` line names the same."""
    pins = dict(
        line.split("==", 1)
        for line in (kit.REPO_ROOT / "infra" / "requirements-dev.txt").read_text().splitlines()
        if "==" in line and not line.lstrip().startswith("#")
    )
    named = re.findall(r"\b(openai|tensorzero)==([\w.]+)", (kit.REPO_ROOT / "README.md").read_text())
    assert {name for name, _ in named} == {"openai", "tensorzero"}, named
    for name, version in named:
        assert pins.get(name, "").strip() == version, f"README names {name}=={version}, pinned: {pins.get(name)}"


LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def anchors_of(document: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but `-` and `_` dropped, spaces as `-`."""
    in_code = False
    found: set[str] = set()
    for line in document.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            heading = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", heading).replace(" ", "-"))
    return found


def test_links_between_the_readme_and_the_docs_resolve() -> None:
    """Every relative link of README.md and docs/*.md names a file that exists and, with `#`, a
    heading of it: moving a section cannot leave a dead link behind."""
    problems: list[str] = []
    for document in [kit.REPO_ROOT / "README.md", *sorted((kit.REPO_ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"```.*?```", "", document.read_text(), flags=re.S)
        for match in LINK.finditer(text):
            target = match["target"]
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (document.parent / path).resolve() if path else document
            if not file.exists():
                problems.append(f"{document.name}: link to missing {target}")
            elif anchor and file.suffix == ".md" and anchor not in anchors_of(file):
                problems.append(f"{document.name}: link to {target}: no such heading in {file.name}")
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------------------------
# Running a document's examples
# --------------------------------------------------------------------------------------------

# Runs python blocks one after another in one namespace: each request is a JSON line
# {"code": ...}; after the block's own output comes one line SENTINEL + {"ok": bool, "error": str}.
SENTINEL = "\x00example-result "
PYTHON_RUNNER = r"""
import json, sys, traceback
namespace = {"__name__": "__main__"}
for line in sys.stdin:
    code = json.loads(line)["code"]
    try:
        exec(compile(code, "<example>", "exec"), namespace)
        result = {"ok": True, "error": ""}
    except BaseException:
        result = {"ok": False, "error": traceback.format_exc()}
    sys.stderr.flush()
    print("\x00example-result " + json.dumps(result), flush=True)
"""


class PythonSession:
    """One Python process per document; blocks share its variables, as in a reader's session."""

    def __init__(self, cwd: Path, env: dict[str, str]):
        self.proc = subprocess.Popen(  # noqa: S603
            [sys.executable, "-u", "-c", PYTHON_RUNNER],
            cwd=str(cwd),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, code: str, timeout: float) -> tuple[bool, str]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"code": code}) + "\n")
        self.proc.stdin.flush()
        output: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return False, "".join(output) + f"\n(no result within {timeout:.0f} s)"
            if line is None:
                return False, "".join(output) + "\n(the Python process died)"
            if line.startswith(SENTINEL):
                result = json.loads(line[len(SENTINEL) :])
                return result["ok"], "".join(output) + result["error"]
            output.append(line)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


def localised(code: str, server: kit.NimbusServer) -> str:
    return code.replace("http://127.0.0.1:3000", server.base_url).replace(
        "localhost:3000", f"127.0.0.1:{server.port}"
    )


def example_env(server: kit.NimbusServer) -> dict[str, str]:
    path = f"{kit.bin_dir()}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return kit.clean_env(
        {
            "PATH": path,
            "NIMBUS_URL": server.base_url,
            "NIMBUS_KEY": "unused-while-open",
            "NIMBUS_DATA_DIR": str(server.data_dir),
            "OPENAI_BASE_URL": server.api_base,
            "OPENAI_API_KEY": "unused-while-open",
            "PYTHONWARNINGS": "error::DeprecationWarning:__main__",
        }
    )


def run_examples(blocks: list[Block], server: kit.NimbusServer, workdir: Path, env: dict[str, str], label: str) -> None:
    """`blocks` in order against `server` from `workdir`; fails with the first failing block."""
    python: PythonSession | None = None
    try:
        for block in blocks:
            code = localised(block.code, server)
            if block.lang == "python":
                if python is None:
                    python = PythonSession(workdir, env)
                ok, output = python.run(code, BLOCK_TIMEOUT_S)
            else:
                try:
                    done = subprocess.run(  # noqa: S603
                        ["bash", "-eu", "-o", "pipefail", "-c", CURL_FAILS_ON_HTTP_ERRORS + code],
                        cwd=str(workdir),
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=BLOCK_TIMEOUT_S,
                        check=False,
                    )
                    ok, output = done.returncode == 0, done.stdout + done.stderr + f"\n(exit status {done.returncode})"
                except subprocess.TimeoutExpired as err:
                    ok, output = False, f"{err.stdout or ''}{err.stderr or ''}\n(timed out after {BLOCK_TIMEOUT_S} s)"
            if ok and re.search(r"deprecat", output, re.I):
                ok, output = False, output + "\n(the example uses something deprecated: write it the current way)"
            if not ok:
                pytest.fail(
                    f"example `{block.name}` ({block.where}), {label}, failed:\n--- code ---\n{code}--- output ---\n{output}",
                    pytrace=False,
                )
    finally:
        if python is not None:
            python.close()


def runnable_blocks(document: Path) -> list[Block]:
    return [b for b in blocks_of(document) if b.lang in RUN_LANGUAGES and b.name and b.skip is None]


@pytest.mark.parametrize("document", [d for d in DOCUMENTS if runnable_blocks(d)], ids=lambda p: p.name)
def test_examples_run_as_written(
    document: Path, tmp_path: Path, server_factory: Callable[..., kit.NimbusServer]
) -> None:
    """Twice, as a reader who runs them again: first on the open server, then, with a key of project
    `default` as `NIMBUS_KEY`, on the same server and data (closed by then), from the same folder."""
    runnable = runnable_blocks(document)
    server = server_factory(f"examples-{document.stem}")
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = example_env(server)
    run_examples(runnable, server, workdir, env, "first run (open server)")
    key = server.cli.create_key("default", name="examples-second-run")["api_key"]
    run_examples(runnable, server, workdir, {**env, "NIMBUS_KEY": key, "OPENAI_API_KEY": key}, "second run (with a key)")
