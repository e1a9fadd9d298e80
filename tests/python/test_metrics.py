"""Metrics (issue #14, first part): the local server keeps its measurements and serves them at
`GET /metrics` in Prometheus text format; a Lambda function writes each one as a CloudWatch
embedded metric format line in its logs. Dimensions are route templates and configured names,
never ids or a client's text.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx
import openai

import nimbus_testkit as kit


def metrics_text(server: kit.NimbusServer) -> str:
    answer = httpx.get(f"{server.base_url}/metrics", timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4"), answer.headers
    return answer.text


def sample(text: str, metric: str, **labels: str) -> float:
    """The value of the one sample of `metric` with exactly these labels (0 when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    match = re.search(rf"^{re.escape(metric)}\{{{re.escape(wanted)}\}} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def test_the_local_server_serves_its_request_and_provider_metrics(
    nimbus_server: kit.NimbusServer, client: openai.OpenAI
) -> None:
    before = metrics_text(nimbus_server)
    answer = client.chat.completions.create(model="dummy", messages=kit.user("metrics please"))
    client.models.retrieve("dummy")
    try:
        client.models.retrieve("no-such-model-4711")
    except openai.NotFoundError:
        pass
    after = metrics_text(nimbus_server)

    def moved(metric: str, **labels: str) -> float:
        return sample(after, metric, **labels) - sample(before, metric, **labels)

    chat = {"method": "POST", "route": "/v1/chat/completions", "status_class": "2xx"}
    assert moved("nimbus_http_requests_total", **chat) == 1, after
    assert moved("nimbus_http_request_duration_seconds_count", **chat) == 1, after
    models = {"method": "GET", "route": "/v1/models/{*model}"}
    assert moved("nimbus_http_requests_total", **models, status_class="2xx") == 1, after
    assert moved("nimbus_http_requests_total", **models, status_class="4xx") == 1, after
    assert "no-such-model-4711" not in after and "metrics please" not in after
    calls = [line for line in after.splitlines() if line.startswith('nimbus_provider_calls_total{model="dummy"')]
    assert calls, after
    tokens_out = sum(
        float(line.rsplit(" ", 1)[1])
        for line in after.splitlines()
        if line.startswith("nimbus_tokens_total{") and 'model="dummy"' in line and 'direction="out"' in line
    )
    assert tokens_out >= answer.usage.completion_tokens, after


def emf_lines(log: str) -> list[dict[str, Any]]:
    found = []
    for line in log.splitlines():
        start = line.find('{"_aws"')
        if start >= 0:
            found.append(json.loads(line[start:]))
    return found


def test_a_lambda_function_writes_embedded_metric_format_lines(
    inference_lambda: kit.LambdaUnderRie, aws_api_key: dict[str, Any]
) -> None:
    event = kit.with_api_key(kit.load_event("inference-models.json"), aws_api_key["api_key"])
    inference_lambda.invoke_raw(event)
    deadline = time.monotonic() + 10
    while True:
        lines = [
            line
            for line in emf_lines(inference_lambda.process.log_text(max_chars=500_000))
            if "http_requests" in line and line.get("route") == "/v1/models"
        ]
        if lines or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert lines, inference_lambda.process.log_text()[-3000:]
    line = lines[-1]
    directive = line["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == "Nimbus"
    assert directive["Dimensions"] == [["function", "route", "method", "status_class"], ["status_class"]]
    assert directive["Metrics"] == [{"Name": "http_requests", "Unit": "Count"}]
    assert line["function"] == "NimbusInferenceFunction"
    assert (line["method"], line["status_class"], line["http_requests"]) == ("GET", "2xx", 1.0)
    assert isinstance(line["_aws"]["Timestamp"], int)


def test_a_requests_log_lines_carry_its_trace_id(
    inference_lambda: kit.LambdaUnderRie, aws_api_key: dict[str, Any]
) -> None:
    """A request's log lines name its X-Ray trace (the runtime's for the invocation, else the
    `x-amzn-trace-id` API Gateway sent) beside its `x-request-id`."""
    event = kit.with_api_key(kit.load_event("inference-chat.json"), aws_api_key["api_key"])
    body = json.loads(event["body"])
    marker = f"trace-{time.time_ns()}"
    event = kit.with_body(event, {**body, "model": "dummy-error", "user": marker})
    event["headers"]["x-request-id"] = marker
    inference_lambda.invoke_raw(event)
    deadline = time.monotonic() + 10
    while True:
        spans = []
        for line in inference_lambda.process.log_text(max_chars=500_000).splitlines():
            start = line.find("{")
            if start < 0 or marker not in line:
                continue
            try:
                spans.append(json.loads(line[start:]).get("span") or {})
            except json.JSONDecodeError:
                continue
        if spans or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert spans, inference_lambda.process.log_text()[-3000:]
    for span in spans:
        assert span["request_id"] == marker, span
        assert span["trace_id"], span
        assert span["trace_id"].startswith("Root=1-"), span


def test_async_requests_are_counted_by_status(nimbus_server: kit.NimbusServer) -> None:
    from async_kit import AsyncApi, chat_input  # noqa: PLC0415

    before = metrics_text(nimbus_server)
    api = AsyncApi(nimbus_server.base_url)
    request_id = api.submit_ok({"model_input": chat_input("counted")})
    assert api.wait(request_id)["status"] == "SUCCEEDED"
    after = metrics_text(nimbus_server)
    for status in ("QUEUED", "SUCCEEDED"):
        moved = sample(after, "nimbus_async_requests_total", status=status) - sample(
            before, "nimbus_async_requests_total", status=status
        )
        assert moved == 1, (status, after)
    # The job waited in the in-process queue before a worker took it.
    assert sample(after, "nimbus_queue_age_seconds_count", job="async_run") >= 1, after


def test_streamed_tokens_and_cache_lookups_are_counted(
    nimbus_server: kit.NimbusServer, client: openai.OpenAI
) -> None:
    before = metrics_text(nimbus_server)
    stream = client.chat.completions.create(
        model="dummy",
        messages=kit.user("count my streamed tokens"),
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [chunk.usage for chunk in stream if chunk.usage is not None]
    assert len(usage) == 1, usage

    body = {
        "model_name": "dummy",
        "input": {"messages": [{"role": "user", "content": f"cache me {time.time_ns()}"}]},
        "cache_options": {"enabled": "on"},
    }
    hit = False
    deadline = time.monotonic() + 10
    while not hit and time.monotonic() < deadline:
        answer = httpx.post(f"{nimbus_server.base_url}/inference", json=body, timeout=10)
        assert answer.status_code == 200, answer.text
        hit = answer.json()["usage"]["input_tokens"] == 0
    assert hit, "the cache never answered"
    after = metrics_text(nimbus_server)

    def moved(metric: str, **labels: str) -> float:
        return sample(after, metric, **labels) - sample(before, metric, **labels)

    streamed = {"model": "dummy", "provider": "dummy"}
    assert moved("nimbus_tokens_total", **streamed, direction="in") >= usage[0].prompt_tokens, after
    assert moved("nimbus_tokens_total", **streamed, direction="out") >= usage[0].completion_tokens, after
    assert moved("nimbus_cache_lookups_total", result="miss") >= 1, after
    assert moved("nimbus_cache_lookups_total", result="hit") >= 1, after
