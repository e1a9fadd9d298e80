"""The `nimbus-mock-lmi` binary for the Python tests: a DJL LMI container (`/invocations`,
`/predictions/{model}`, `/{schema}/invocations`) and a SageMaker runtime
(`/endpoints/{name}/invocations[-response-stream]`) on one loopback port, recording every request.

Its behaviour (answers, markers, error shapes) is documented in `infra/bench/src/mock_lmi.rs`:
every answer is `Hello from LMI` (tokens `Hello`, ` from`, ` LMI`), cut by `max_new_tokens` and
stop sequences; markers in the prompt (`[lmi-424]`, `[lmi-error-finish]`, …) change it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import requests

import nimbus_testkit as kit

ANSWER = "Hello from LMI"
ANSWER_TOKENS = ["Hello", " from", " LMI"]
# The message of the mock's `[lmi-424]` answer (inside the container's `{"error", "code"}` body).
REJECTED_MESSAGE = "input rejected by the model"
EMBEDDING_DIMENSIONS = 8

_LISTENING = re.compile(r"^listening on (127\.0\.0\.1:\d+)$", re.MULTILINE)


class MockLmi:
    """`nimbus-mock-lmi --port 0`, its address read from its first stdout line."""

    def __init__(self, log_dir: Path, name: str = "mock-lmi"):
        self.process = kit.ManagedProcess(
            name,
            [str(kit.binary("nimbus-mock-lmi")), "--port", "0"],
            env=kit.clean_env(),
            cwd=kit.REPO_ROOT,
            log_path=log_dir / f"{name}-{kit.free_port()}.log",
        )
        self.url = ""
        try:
            kit.wait_until(self._listening, timeout=30, what=f"{name} to listen", process=self.process)
        except BaseException:
            self.process.stop()
            raise

    def _listening(self) -> bool:
        found = _LISTENING.search(self.process.log_path.read_text(errors="replace"))
        if found:
            self.url = f"http://{found.group(1)}"
        return bool(found)

    def requests(self) -> list[dict[str, Any]]:
        """Every request recorded so far: `{"path", "headers", "body"}`."""
        response = requests.get(f"{self.url}/_requests", timeout=10)
        response.raise_for_status()
        return response.json()

    def requests_with(self, text: str) -> list[dict[str, Any]]:
        """The recorded requests whose body mentions `text` anywhere."""
        return [request for request in self.requests() if text in _text_of(request["body"])]

    def direct(self, path: str, body: dict[str, Any]) -> requests.Response:
        """Calls the mock itself (e.g. to compare with what the gateway answered)."""
        return requests.post(f"{self.url}{path}", json=body, timeout=10)

    def stop(self) -> None:
        self.process.stop()


def _text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return " ".join(_text_of(v) for v in value.values())
    if isinstance(value, list):
        return " ".join(_text_of(v) for v in value)
    return ""
