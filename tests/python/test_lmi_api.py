"""The LMI API Nimbus serves (`/invocations`, `/predictions/{model}`, `/ping`), called with plain
HTTP as code written for a DJL Serving / LMI endpoint would: every request schema, JSON-lines and
SSE streaming, LMI's error bodies, authentication."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import requests

import nimbus_testkit as kit

MODELS = """
[gateway.retries]
max_retries = 0

[models.dummy]
routing = ["dummy"]
[models.dummy.providers.dummy]
type = "dummy"

[models.dummy-error]
routing = ["failing"]
[models.dummy-error.providers.failing]
type = "dummy"
fail_with_status = 500
"""

TARGET = "X-Amzn-SageMaker-Target-Model"


def _config(tmp: Path, name: str, lmi_api: str) -> Path:
    path = tmp / f"{name}.toml"
    path.write_text(MODELS + "\n[lmi_api]\n" + lmi_api)
    return path


@pytest.fixture(scope="module")
def lmi_server(server_factory: Callable[..., kit.NimbusServer], tmp_path_factory: pytest.TempPathFactory) -> str:
    config = _config(tmp_path_factory.mktemp("lmi-config"), "lmi", 'default_model = "dummy"\n')
    return server_factory("nimbus-lmi", config=config).base_url


@pytest.fixture(scope="module")
def tgi_server(server_factory: Callable[..., kit.NimbusServer], tmp_path_factory: pytest.TempPathFactory) -> str:
    config = _config(tmp_path_factory.mktemp("tgi-config"), "tgi", "tgi_compat = true\n")
    return server_factory("nimbus-lmi-tgi", config=config).base_url


@pytest.fixture(scope="module")
def keyed_lmi(server_factory: Callable[..., kit.NimbusServer], tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    config = _config(tmp_path_factory.mktemp("keyed-config"), "keyed", 'default_model = "dummy"\n')
    created: dict[str, Any] = {}
    server = server_factory(
        "nimbus-lmi-keyed", config=config, before_start=lambda cli: created.update(cli.create_key("lmi", name="k"))
    )
    return server.base_url, created["api_key"]


def post(base: str, path: str, body: Any, headers: dict[str, str] | None = None, stream: bool = False) -> requests.Response:
    return requests.post(f"{base}{path}", json=body, headers=headers or {}, timeout=30, stream=stream)


def json_lines(response: requests.Response) -> list[dict[str, Any]]:
    return [json.loads(line) for line in response.iter_lines() if line.strip()]


def sse_events(response: requests.Response) -> list[dict[str, Any]]:
    events = []
    for line in response.iter_lines(decode_unicode=True):
        if line.startswith("data:"):
            events.append(json.loads(line[len("data:") :]))
    return events


# ---- rolling batch -------------------------------------------------------------------------


def test_ping_is_healthy(lmi_server: str) -> None:
    response = requests.get(f"{lmi_server}/ping", timeout=5)
    assert response.status_code == 200


def test_rolling_batch_without_details(lmi_server: str) -> None:
    response = post(lmi_server, "/invocations", {"inputs": "What is Deep Learning?"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"generated_text"}
    assert "What is Deep Learning?" in body["generated_text"]


def test_rolling_batch_with_details_and_full_text(lmi_server: str) -> None:
    body = post(
        lmi_server,
        "/predictions/dummy",
        {"inputs": "one two three four", "parameters": {"details": True, "max_new_tokens": 2, "return_full_text": True}},
    ).json()
    assert body["generated_text"].startswith("one two three four")
    details = body["details"]
    assert details["finish_reason"] == "length"
    assert details["generated_tokens"] == 2
    assert details["inputs"] == "one two three four"
    assert "prefill" not in details


def test_the_target_model_header_picks_the_model(lmi_server: str) -> None:
    response = post(lmi_server, "/invocations", {"inputs": "hi"}, headers={TARGET: "dummy-error"})
    assert response.status_code == 424
    body = response.json()
    assert body["code"] == 424 and body["message"] == "invoke handler failure"
    assert "failed" in body["error"]


def test_rolling_stream_as_json_lines(lmi_server: str) -> None:
    response = post(
        lmi_server, "/invocations", {"inputs": "tell me more", "stream": True, "parameters": {"details": True}}, stream=True
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/jsonlines")
    lines = json_lines(response)
    assert len(lines) > 1
    assert all({"id", "text", "log_prob"} <= set(line["token"]) for line in lines)
    assert all("generated_text" not in line for line in lines[:-1])
    last = lines[-1]
    assert last["generated_text"] == "".join(line["token"]["text"] for line in lines)
    assert last["details"]["finish_reason"] == "eos_token"
    assert last["details"]["inputs"] == "tell me more"


def test_rolling_stream_has_details_only_when_asked(lmi_server: str) -> None:
    response = post(lmi_server, "/invocations", {"inputs": "tell me more", "stream": True}, stream=True)
    lines = json_lines(response)
    assert lines[-1]["generated_text"] == "".join(line["token"]["text"] for line in lines)
    assert all("details" not in line for line in lines)


def test_rolling_stream_as_sse_when_accepted(lmi_server: str) -> None:
    response = post(
        lmi_server,
        "/invocations",
        {"inputs": "tell me more", "stream": True},
        headers={"Accept": "text/event-stream"},
        stream=True,
    )
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response)
    assert len(events) > 1 and "generated_text" in events[-1]


# ---- TGI compatibility ---------------------------------------------------------------------


def test_tgi_compat_answers_an_array_and_streams_sse(tgi_server: str) -> None:
    body = post(tgi_server, "/predictions/dummy", {"inputs": "hello", "parameters": {"details": True}}).json()
    assert isinstance(body, list) and len(body) == 1
    assert body[0]["details"]["finish_reason"] == "eos_token"
    response = post(tgi_server, "/predictions/dummy", {"inputs": "hello", "stream": True}, stream=True)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response)
    assert events[-1]["details"]["finish_reason"] == "eos_token"


def test_without_a_default_model_invocations_needs_the_header(tgi_server: str) -> None:
    response = post(tgi_server, "/invocations", {"inputs": "hello"})
    assert response.status_code == 424
    assert TARGET in response.json()["error"]
    assert post(tgi_server, "/invocations", {"inputs": "hello"}, headers={TARGET: "dummy"}).status_code == 200


# ---- dynamic batch -------------------------------------------------------------------------


def test_dynamic_batch_answers_in_input_order(lmi_server: str) -> None:
    prompts = [f"prompt number {i}" for i in range(5)]
    body = post(lmi_server, "/invocations", {"inputs": prompts, "parameters": {"max_new_tokens": 20}}).json()
    assert isinstance(body, list) and len(body) == 5
    for prompt, answer in zip(prompts, body):
        assert set(answer) == {"generated_text"}
        assert prompt in answer["generated_text"]


def test_dynamic_batch_stream_has_outputs_lines(lmi_server: str) -> None:
    response = post(lmi_server, "/invocations", {"inputs": ["a b", "c d e f"], "stream": True}, stream=True)
    lines = json_lines(response)
    assert lines and all(len(line["outputs"]) == 2 for line in lines)
    assert "".join(line["outputs"][1] for line in lines).endswith("c d e f")


# ---- chat ----------------------------------------------------------------------------------


def test_chat_messages_answer_a_chat_completion(lmi_server: str) -> None:
    body = post(lmi_server, "/invocations", {"messages": [{"role": "user", "content": "hi there"}], "max_tokens": 50}).json()
    assert body["object"] == "chat.completion"
    assert "hi there" in body["choices"][0]["message"]["content"]


def test_chat_stream_is_json_lines_of_chunks(lmi_server: str) -> None:
    response = post(
        lmi_server, "/invocations", {"messages": [{"role": "user", "content": "hi there"}], "stream": True}, stream=True
    )
    assert response.headers["content-type"].startswith("application/jsonlines")
    raw = response.content.decode()
    assert "data:" not in raw
    chunks = [json.loads(line) for line in raw.splitlines() if line.strip()]
    assert chunks and all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert "hi there" in "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


# ---- errors --------------------------------------------------------------------------------


def test_unknown_model_is_404(lmi_server: str) -> None:
    response = post(lmi_server, "/predictions/no-such-model", {"inputs": "x"})
    assert response.status_code == 404
    assert response.json()["code"] == 404


@pytest.mark.parametrize(
    "body, named",
    [
        ({"inputs": "x", "parameters": {"bogus_param": 1}}, "bogus_param"),
        ({"inputs": "x", "parameters": {"max_new_tokens": -3}}, "max_new_tokens"),
        ({"inputs": "x", "parameters": {"temperature": "hot"}}, "temperature"),
        ({"parameters": {}}, "inputs"),
        ({"inputs": 5}, "inputs"),
    ],
)
def test_bad_requests_are_424_naming_the_field(lmi_server: str, body: dict[str, Any], named: str) -> None:
    response = post(lmi_server, "/invocations", body)
    assert response.status_code == 424
    error = response.json()
    assert error["code"] == 424 and named in error["error"]


def test_malformed_json_is_an_lmi_error(lmi_server: str) -> None:
    response = requests.post(
        f"{lmi_server}/invocations", data="{not json", headers={"content-type": "application/json"}, timeout=10
    )
    assert response.status_code == 424
    assert response.json()["code"] == 424


def test_auth_errors_have_lmi_bodies(keyed_lmi: tuple[str, str]) -> None:
    base, key = keyed_lmi
    missing = post(base, "/invocations", {"inputs": "x"})
    assert missing.status_code == 401
    assert missing.json()["code"] == 401 and missing.json()["error"]
    wrong = post(base, "/invocations", {"inputs": "x"}, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    ok = post(base, "/invocations", {"inputs": "x"}, headers={"Authorization": f"Bearer {key}"})
    assert ok.status_code == 200, ok.text
    assert requests.get(f"{base}/ping", timeout=5).status_code == 200


# ---- an LMI model behind the LMI API ---------------------------------------------------------


class _RecordingLmi(BaseHTTPRequestHandler):
    """A rolling-batch LMI container that records the bodies it is sent."""

    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        length = int(self.headers.get("content-length", "0"))
        type(self).bodies.append(json.loads(self.rfile.read(length)))
        answer = json.dumps({"generated_text": "ok", "details": {"finish_reason": "eos_token", "generated_tokens": 1}})
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(answer.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def lmi_on_lmi(
    server_factory: Callable[..., kit.NimbusServer], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, type[_RecordingLmi]]]:
    """A Nimbus whose model `container` is an LMI container (the recording one above)."""
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _RecordingLmi)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    path = tmp_path_factory.mktemp("lmi-upstream") / "config.toml"
    path.write_text(
        MODELS
        + f"""
[models.container]
routing = ["lmi"]
[models.container.providers.lmi]
type = "lmi"
endpoint_url = "http://127.0.0.1:{upstream.server_address[1]}/invocations"
chat_template = "chatml"
"""
    )
    yield server_factory("nimbus-lmi-upstream", config=path).base_url, _RecordingLmi
    upstream.shutdown()
    upstream.server_close()


def test_an_inputs_prompt_reaches_an_lmi_model_as_is(lmi_on_lmi: tuple[str, type[_RecordingLmi]]) -> None:
    base, upstream = lmi_on_lmi
    prompt = "<|im_start|>user\nWhat is Deep Learning?<|im_end|>\n<|im_start|>assistant\n"
    response = post(base, "/predictions/container", {"inputs": prompt, "parameters": {"max_new_tokens": 8}})
    assert response.status_code == 200, response.text
    assert response.json() == {"generated_text": "ok"}
    sent = upstream.bodies[-1]
    assert sent["inputs"] == prompt, "an already formatted prompt is not wrapped in the chat template again"
    assert sent["parameters"]["max_new_tokens"] == 8
