"""What every part of the batch benchmarks shares: the workload, the Lambda functions' sizes,
process and machine-load helpers, and the generated input files and config."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
# tests/python/nimbus_testkit.py: the server, moto and RIE harness the parts that run batches use.
sys.path.insert(0, str(REPO / "tests" / "python"))

LINES = 50_000
MODEL = "dummy-20ms"
MODEL_LATENCY_S = 0.020
# The AWS part also runs a few chunks with a model as slow as a real one, to see how the request
# count grows with how long a chunk runs (checkpoints, cancel checks).
SLOW_MODEL = "dummy-2s"
SLOW_LATENCY_S = 2.0
SLOW_LINES = 4000
BATCH_WORKERS = 4
LINE_CONCURRENCY = 16
LINES_PER_CHUNK = 1000
TARGET_RATIO = 1.25
TARGET_AWS_REQUESTS = 2000

# `/batch_inference` (parts `tz-local`, `tz-aws`): a chat function on `MODEL` with a templated system
# prompt, and the same requests as a `/v1/batches` chat batch.
TZ_INPUTS = 10_000
TZ_FUNCTION = "bench_batch"
TZ_ASSISTANT = "Ann"
TZ_SYSTEM_TEMPLATE = "You are {{ assistant_name }}, a concise assistant. Answer in one sentence."
TZ_SYSTEM_TEXT = f"You are {TZ_ASSISTANT}, a concise assistant. Answer in one sentence."

# Function sizes from template.yaml (MemorySize, MB).
MEMORY_MB = {"files": 1024, "batches": 256, "worker": 512, "poller": 256}
TIMEOUT_S = {"files": 30, "batches": 30, "worker": 300, "poller": 300}
RESOURCES = {
    "files": ("NimbusFilesFunction", "nimbus-files"),
    "batches": ("NimbusBatchesFunction", "nimbus-batches"),
    "status": ("NimbusBatchesFunction", "nimbus-batches"),
    "worker": ("NimbusWorkerFunction", "nimbus-worker"),
    "poller": ("NimbusPollerFunction", "nimbus-poller"),
}


def log(message: str) -> None:
    print(f"[batch-bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def proc_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class MachineLoad:
    """CPU the whole machine spent busy since creation (user, nice, system, steal), so that CPU
    used by other work during a measurement can be reported."""

    def __init__(self) -> None:
        self.start_busy = self._busy()
        self.start_children = self._children()

    @staticmethod
    def _busy() -> float:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
        return (int(fields[1]) + int(fields[2]) + int(fields[3]) + int(fields[8])) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _children() -> float:
        times = os.times()
        return times.user + times.system + times.children_user + times.children_system

    def other_cpu_s(self, own_cpu_s: float = 0.0) -> float:
        """Busy CPU seconds not spent by this script, its reaped children or `own_cpu_s`."""
        mine = self._children() - self.start_children + own_cpu_s
        return max(0.0, self._busy() - self.start_busy - mine)


def wait_for_quiet(max_wait: float) -> float:
    """Wait (at most `max_wait` s) until the machine is idle: under 10 % of one core busy over 5 s.
    Returns the seconds waited."""
    waited = 0.0
    while waited < max_wait:
        load = MachineLoad()
        time.sleep(5)
        if load.other_cpu_s() / 5 < 0.10:
            break
        waited += 5
        if waited % 30 == 0:
            log(f"waiting for the machine to go quiet ({waited:.0f}s)")
    return waited


class SkipPart(Exception):
    """A part that cannot run here (a binary is missing)."""


# --------------------------------------------------------------------------------------------
# Input files and config
# --------------------------------------------------------------------------------------------


def user_text(i: int) -> str:
    """The user message of request `i` (the same in every part that does not pad)."""
    return f"Say something about the number {i}."


def write_input(path: Path, *, lines: int, size: int | None, model: str, system: str | None = None) -> int:
    """`lines` chat requests `{"custom_id":"req-000001",…}`, each after a `system` message when
    given; with `size`, each user message is padded with words so the file is exactly `size`
    bytes. Returns the file's size."""
    head = '{"custom_id":"req-%06d","method":"POST","url":"/v1/chat/completions","body":{"model":"' + model
    head += '","messages":['
    if system is not None:
        head += json.dumps({"role": "system", "content": system}).replace("%", "%%") + ","
    head += '{"role":"user","content":"'
    tail = '"}],"max_tokens":16}}\n'
    base = len(head % 0) + len(tail)
    words = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor " * 4096).encode()
    written = 0
    with path.open("wb", buffering=8 * 1024 * 1024) as out:
        for i in range(lines):
            if size is None:
                text = user_text(i).encode()
            else:
                room = (size - written) // (lines - i) - base
                if room < 1:
                    raise SystemExit(f"{size} bytes is too small for {lines} lines")
                text = words[: room - 1] + b"."
            line = (head % (i + 1)).encode() + text + tail.encode()
            out.write(line)
            written += len(line)
    return written


def tz_inputs(count: int) -> list[dict]:
    """`count` `/inference` inputs of the benchmark function: the same conversations as the lines
    `write_input(..., system=TZ_SYSTEM_TEXT)` writes, the system prompt coming from the template."""
    return [
        {"system": {"assistant_name": TZ_ASSISTANT}, "messages": [{"role": "user", "content": user_text(i)}]}
        for i in range(count)
    ]


def write_bench_config(directory: Path) -> Path:
    """The benchmark's config directory: `bench-batches.toml` (`bench_config()`), the files
    infra/config/nimbus.toml refers to (templates, schemas, tools) and the benchmark function's
    own, at the same relative paths. Returns the TOML's path."""
    import nimbus_testkit as kit

    source = kit.DEFAULT_CONFIG.parent
    for path in source.rglob("*"):
        if path.is_file() and path.suffix != ".toml":
            target = directory / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    function_dir = directory / "functions" / TZ_FUNCTION
    function_dir.mkdir(parents=True, exist_ok=True)
    (function_dir / "system.minijinja").write_text(TZ_SYSTEM_TEMPLATE)
    schema = {
        "type": "object",
        "properties": {"assistant_name": {"type": "string"}},
        "required": ["assistant_name"],
        "additionalProperties": False,
    }
    (function_dir / "system_schema.json").write_text(json.dumps(schema, indent=2))
    config = directory / "bench-batches.toml"
    config.write_text(bench_config())
    return config


def bench_config() -> str:
    """infra/config/nimbus.toml plus `dummy-20ms`, `dummy-2s`, explicit `[batches]` settings and
    the chat function `bench_batch` on `dummy-20ms` (its files: `write_bench_config`)."""
    import nimbus_testkit as kit

    text = kit.DEFAULT_CONFIG.read_text()
    settings = {"lines_per_chunk": LINES_PER_CHUNK, "line_concurrency": LINE_CONCURRENCY}
    if re.search(r"(?m)^\[batches\]\s*$", text):
        for name in settings:
            text = re.sub(rf"(?m)^{name}\s*=.*$\n?", "", text)
        block = "\n".join(f"{k} = {v}" for k, v in settings.items())
        text = re.sub(r"(?m)^\[batches\]\s*$", f"[batches]\n{block}", text, count=1)
    else:
        text = text.rstrip() + "\n\n[batches]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items())
    for model, latency in ((MODEL, MODEL_LATENCY_S), (SLOW_MODEL, SLOW_LATENCY_S)):
        text = (
            text.rstrip()
            + f"""

# Benchmark model: like `dummy`, {latency * 1000:.0f} ms per answer.
[models.{model}]
routing = ["dummy"]

[models.{model}.providers.dummy]
type = "dummy"
latency_ms = {latency * 1000:.0f}
"""
        )
    return (
        text.rstrip()
        + f"""

# Benchmark function (`/batch_inference`): a templated system prompt, one variant on `{MODEL}`.
[functions.{TZ_FUNCTION}]
type = "chat"
system_schema = "functions/{TZ_FUNCTION}/system_schema.json"

[functions.{TZ_FUNCTION}.variants.main]
type = "chat_completion"
model = "{MODEL}"
system_template = "functions/{TZ_FUNCTION}/system.minijinja"
max_tokens = 16
"""
    )


def engine_floor_s(lines: int, latency_ms: float, workers: int = BATCH_WORKERS) -> float:
    """What a perfect engine would take with this model and this chunking: every worker busy with
    whole chunks (ceil(chunks / workers) rounds), each chunk ceil(lines / concurrency) waves of
    the model's real latency."""
    chunks = math.ceil(lines / LINES_PER_CHUNK)
    per_chunk = min(lines, LINES_PER_CHUNK)
    return math.ceil(chunks / workers) * math.ceil(per_chunk / LINE_CONCURRENCY) * latency_ms / 1000


def count_lines(chunks) -> int:
    total = 0
    for block in chunks:
        total += block.count(b"\n")
    return total
