"""Streaming out of the inference Lambda, for real. The `nimbus-inference` binary runs against
cargo-lambda's Runtime API emulator: the RIE of this SAM release buffers a streamed result and
hands it over whole (see test_lambda_rie.py), so it cannot show this. Stand-ins for the streaming
REST API (what the stack deploys: REST proxy events, streaming integrations) and for a function URL
(RESPONSE_STREAM mode) turn the OpenAI SDK's requests into their events. The model is
an OpenAI-compatible upstream that sends one word every PACE_S seconds and notes when it sent each;
the client must see the first word before the upstream has even sent the last one.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import pytest
import requests

import nimbus_testkit as kit

PACE_S = 0.4
WORDS = ["Streaming ", "really ", "streams ", "out of ", "Lambda."]


class PacedUpstream:
    """`/v1/chat/completions` of an OpenAI-compatible server: a stream sends one word every
    PACE_S seconds (`sent_at` holds when each word of the latest stream left); a plain request
    gets the whole sentence."""

    def __init__(self) -> None:
        self.sent_at: list[float] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                base = {"id": "chatcmpl-paced", "created": 1, "model": body["model"]}
                usage = {"prompt_tokens": 3, "completion_tokens": len(WORDS), "total_tokens": 3 + len(WORDS)}
                if not body.get("stream"):
                    message = {"role": "assistant", "content": "".join(WORDS)}
                    answer = {
                        **base,
                        "object": "chat.completion",
                        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        "usage": usage,
                    }
                    payload = json.dumps(answer).encode()
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                # HTTP/1.0: the body ends when the connection closes.
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                upstream.sent_at = []

                def send(chunk: dict[str, Any]) -> None:
                    self.wfile.write(f"data: {json.dumps({**base, 'object': 'chat.completion.chunk', **chunk})}\n\n".encode())
                    self.wfile.flush()

                try:
                    for number, word in enumerate(WORDS):
                        if number:
                            time.sleep(PACE_S)
                        delta = {"content": word, **({"role": "assistant"} if number == 0 else {})}
                        send({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
                        upstream.sent_at.append(time.monotonic())
                    send({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                    send({"choices": [], "usage": usage})
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading (the first-token measurement does)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="paced-upstream", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def config_with_paced_model(upstream: PacedUpstream) -> str:
    """The default config plus `paced`, a model served by `upstream`."""
    return (
        kit.DEFAULT_CONFIG.read_text().rstrip()
        + f"""

[models.paced]
routing = ["upstream"]

[models.paced.providers.upstream]
type = "openai"
model_name = "paced-model"
api_base = "http://127.0.0.1:{upstream.port}/v1"
api_key_location = "none"
"""
    )


@pytest.fixture(scope="module")
def upstream() -> Iterator[PacedUpstream]:
    server = PacedUpstream()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def emulator(moto: kit.MotoServer, upstream: PacedUpstream, logs_dir: Path) -> Iterator[kit.CargoLambdaEmulator]:
    """cargo-lambda's emulator with `nimbus-inference` polling it: the template's environment,
    moto, and a config from S3 (ConfigSource=s3://…) that adds the paced model."""
    emulator = kit.CargoLambdaEmulator(logs_dir)
    try:
        env = kit.clean_env(
            {
                **kit.template_environment("NimbusInferenceFunction"),
                **moto.aws_env(),
                "NIMBUS_CONFIG_SOURCE": moto.put_config("streaming", config_with_paced_model(upstream)),
            }
        )
        emulator.start_function(kit.binary("nimbus-inference"), env, name="inference-cargo-lambda")
        yield emulator
    finally:
        emulator.stop()


# The streaming fronts, each a stand-in relaying to the emulator: the streaming REST API the stack
# deploys, and a function URL (what it deployed before issue #27).
FRONTS = {"rest_api": kit.StreamingRestApiRelay, "function_url": kit.FunctionUrlRelay}


@pytest.fixture(scope="module")
def fronts(emulator: kit.CargoLambdaEmulator) -> Iterator[dict[str, kit.FunctionUrlRelay]]:
    started: dict[str, kit.FunctionUrlRelay] = {}
    try:
        for name, relay in FRONTS.items():
            started[name] = relay(emulator)
        yield started
    finally:
        for relay in started.values():
            relay.stop()


@pytest.fixture(params=list(FRONTS))
def front(request: pytest.FixtureRequest, fronts: dict[str, kit.FunctionUrlRelay]) -> kit.FunctionUrlRelay:
    """Each streaming front in turn."""
    return fronts[request.param]


@pytest.fixture
def client(front: kit.FunctionUrlRelay, aws_api_key: dict[str, Any]) -> openai.OpenAI:
    return kit.make_client(front.api_base, api_key=aws_api_key["api_key"], timeout=60.0)


def test_sse_chunks_reach_the_client_while_the_upstream_is_still_sending(
    client: openai.OpenAI, upstream: PacedUpstream, front: kit.FunctionUrlRelay
) -> None:
    arrivals: list[tuple[float, str]] = []
    usage = None
    stream = client.chat.completions.create(
        model="paced", messages=kit.user("Stream it."), stream=True, stream_options={"include_usage": True}
    )
    for chunk in stream:
        usage = chunk.usage or usage
        arrivals += [(time.monotonic(), c.delta.content) for c in chunk.choices if c.delta.content]
    assert front.response_modes[-1] == "streaming", front.response_modes
    assert [text for _, text in arrivals] == WORDS
    assert usage is not None and usage.completion_tokens == len(WORDS)
    first_seen, last_sent = arrivals[0][0], upstream.sent_at[-1]
    assert first_seen < last_sent, (
        f"the first word reached the client {first_seen - last_sent:.2f} s after the upstream sent the last one: "
        "the answer was buffered"
    )
    # Spread out as the upstream paced them (generous: half the pacing).
    assert arrivals[-1][0] - arrivals[0][0] >= PACE_S * (len(WORDS) - 1) / 2


def test_a_request_that_is_not_streamed_is_answered_normally(
    client: openai.OpenAI, front: kit.FunctionUrlRelay
) -> None:
    reply = client.chat.completions.create(model="paced", messages=kit.user("Say it at once."))
    assert reply.choices[0].message.content == "".join(WORDS)
    assert reply.usage is not None and reply.usage.total_tokens == 3 + len(WORDS)
    # A streaming front takes every answer in the streaming format, whole ones included.
    assert front.response_modes[-1] == "streaming"
    dummy = client.chat.completions.create(model="dummy", messages=kit.user("Hello"))
    assert dummy.choices[0].message.content
    assert "paced" in {model.id for model in client.models.list()}
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="no-such-model", messages=kit.user("Hello"))
    assert missing.value.code == "model_not_found"


def test_an_http_api_invocation_is_still_answered_whole(
    emulator: kit.CargoLambdaEmulator, aws_api_key: dict[str, Any]
) -> None:
    """The same function, invoked as the HTTP API invokes it: one proxy response object."""
    event = kit.with_api_key(kit.load_event("inference-chat-stream.json"), aws_api_key["api_key"])
    answer = requests.post(emulator.invoke_url, json=event, timeout=60)
    assert answer.status_code == 200, answer.text
    assert "lambda-runtime-function-response-mode" not in answer.headers
    result = answer.json()
    assert result["statusCode"] == 200, result
    events, done = kit.parse_sse(kit.response_body_text(result))
    assert done and len(events) >= 3


def test_a_forged_key_is_refused_through_the_streaming_front(front: kit.FunctionUrlRelay, aws_api_key: dict[str, Any]) -> None:
    key = aws_api_key["api_key"]
    body, tag = key.split(".", 1)
    for forged in (body, f"{body}.{'0' * len(tag)}"):
        answer = requests.post(
            f"{front.api_base}/chat/completions",
            headers={"authorization": f"Bearer {forged}"},
            json={"model": "paced", "messages": kit.user("Hi"), "stream": True},
            timeout=30,
        )
        assert answer.status_code == 401, answer.text
        assert kit.error_envelope(answer)["code"] == "invalid_api_key"


def first_token_seconds(client: openai.OpenAI) -> float:
    """Time from sending a streamed request to its first content chunk."""
    started = time.monotonic()
    stream = client.chat.completions.create(model="paced", messages=kit.user("Go."), stream=True)
    try:
        for chunk in stream:
            if any(choice.delta.content for choice in chunk.choices):
                return time.monotonic() - started
    finally:
        stream.close()
    raise AssertionError("no content chunk")


def test_first_token_latency_of_each_front(fronts: dict[str, kit.FunctionUrlRelay], aws_api_key: dict[str, Any]) -> None:
    """First-token latency through the emulator, the streaming REST API's events against a function
    URL's (the upstream sends its first word at once). The relays are the same; what differs is
    the event shape and the function's handling of it. Printed for docs/benchmarks.md (`-s`)."""
    clients = {
        name: kit.make_client(relay.api_base, api_key=aws_api_key["api_key"], timeout=60.0)
        for name, relay in fronts.items()
    }
    measured: dict[str, list[float]] = {name: [] for name in clients}
    for name, client in clients.items():
        first_token_seconds(client)  # warm: the key is verified and cached
    for _ in range(15):  # interleaved, so drift hits both alike
        for name, client in clients.items():
            measured[name].append(first_token_seconds(client))
    measured = {name: sorted(values) for name, values in measured.items()}
    medians = {name: values[len(values) // 2] for name, values in measured.items()}
    print(
        "first-token latency through the emulator (median, p90 of 15): "
        + ", ".join(f"{name} {medians[name] * 1000:.1f} ms, {values[13] * 1000:.1f} ms" for name, values in measured.items())
    )
    # The first word arrives long before the second is produced, through either front.
    assert all(median < PACE_S / 2 for median in medians.values()), medians
