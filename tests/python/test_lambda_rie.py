"""The `nimbus-inference` Lambda binary under the Runtime Interface Emulator, with its state in
moto, driven by the event files in infra/events (the same ones `sam local invoke -e` takes).

Each event's placeholder bearer (`nmb_REPLACE_WITH_YOUR_KEY`) is replaced by a key created with
`nimbus keys create --backend aws --project demo` against the same moto table.

Function URL events are answered in Lambda's streaming format (the function URL runs in
RESPONSE_STREAM mode); this RIE hands such a result over whole, so these tests check its format
and content. That it really streams is shown in test_lambda_streaming.py.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import requests

import nimbus_testkit as kit

# Listed models of the bundled config (`gpt-4o-mini` needs OPENAI_API_KEY, empty under the RIE).
MODELS = {"dummy", "dummy-embedding", "dummy-error", "dummy-slow", "dummy-fallback"}


# --------------------------------------------------------------------------------------------
# What each event file must produce
# --------------------------------------------------------------------------------------------


def check_health(body: str, headers: dict[str, str]) -> None:
    assert json.loads(body) == {"status": "ok"}


def check_openapi(body: str, headers: dict[str, str]) -> None:
    assert headers.get("content-type") == "application/json", headers
    assert json.loads(body) == json.loads((kit.REPO_ROOT / "docs" / "openapi.json").read_text())


def check_models(body: str, headers: dict[str, str]) -> None:
    payload = json.loads(body)
    assert payload["object"] == "list"
    assert MODELS <= {model["id"] for model in payload["data"]}
    assert all(model["object"] == "model" for model in payload["data"])


def check_one_model(body: str, headers: dict[str, str]) -> None:
    payload = json.loads(body)
    assert payload["id"] == "dummy"
    assert payload["object"] == "model"


def check_chat(body: str, headers: dict[str, str]) -> None:
    payload = json.loads(body)
    assert payload["object"] == "chat.completion"
    assert payload["id"].startswith("chatcmpl-")
    assert payload["model"] == "dummy"
    choice = payload["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str) and choice["message"]["content"]
    assert choice["finish_reason"] in {"stop", "length"}
    usage = payload["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def check_chat_stream(body: str, headers: dict[str, str]) -> None:
    assert headers.get("content-type", "").startswith("text/event-stream"), headers
    events, done = kit.parse_sse(body)
    assert done, f"no [DONE] at the end: {body[-200:]!r}"
    assert len(events) >= 3
    assert len({event["id"] for event in events}) == 1
    assert all(event["object"] == "chat.completion.chunk" for event in events)
    assert events[0]["choices"][0]["delta"].get("role") == "assistant"
    assert events[-1]["choices"] == [] and events[-1]["usage"]["total_tokens"] > 0
    assert events[-2]["choices"][0]["finish_reason"] in {"stop", "length"}
    assert stream_text(events)


def check_embeddings(body: str, headers: dict[str, str]) -> None:
    payload = json.loads(body)
    assert payload["object"] == "list"
    assert payload["model"] == "dummy-embedding"
    assert [item["index"] for item in payload["data"]] == list(range(len(payload["data"])))
    assert len(payload["data"]) >= 1
    for item in payload["data"]:
        assert item["object"] == "embedding"
        assert isinstance(item["embedding"], list) and len(item["embedding"]) == 16
        assert all(isinstance(v, float) for v in item["embedding"])
    assert payload["usage"]["prompt_tokens"] > 0


def check_bad_request(body: str, headers: dict[str, str]) -> None:
    error = json.loads(body)["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "messages", error


TENSORZERO_FINISH_REASONS = {"stop", "stop_sequence", "length", "tool_call", "content_filter", "unknown"}


def check_tensorzero_inference(body: str, headers: dict[str, str]) -> None:
    payload = json.loads(body)
    assert uuid.UUID(payload["inference_id"]).version == 7, payload
    assert uuid.UUID(payload["episode_id"]).version == 7, payload
    assert payload["variant_name"] in {"formal", "casual", "careful"}, payload
    text_blocks = [block for block in payload["content"] if block["type"] == "text"]
    assert text_blocks and all(block["text"] for block in text_blocks), payload
    assert payload["usage"]["input_tokens"] > 0 and payload["usage"]["output_tokens"] > 0, payload
    assert payload["finish_reason"] in TENSORZERO_FINISH_REASONS, payload


def check_lmi_rolling(body: str, headers: dict[str, str]) -> None:
    payload = json.loads(body)
    assert "What is Deep Learning?" in payload["generated_text"], payload
    assert payload["details"]["finish_reason"] in {"eos_token", "length"}, payload
    assert payload["details"]["generated_tokens"] > 0, payload


def check_lmi_stream(body: str, headers: dict[str, str]) -> None:
    assert headers.get("content-type", "").startswith("application/jsonlines"), headers
    lines = [json.loads(line) for line in body.splitlines() if line.strip()]
    assert len(lines) > 1 and all("token" in line for line in lines), lines
    assert lines[-1]["generated_text"] == "".join(line["token"]["text"] for line in lines)
    assert lines[-1]["details"]["finish_reason"] in {"eos_token", "length"}


Check = Callable[[str, dict[str, str]], None]

EXPECTED: dict[str, tuple[int, Check]] = {
    "inference-health.json": (200, check_health),
    "inference-openapi.json": (200, check_openapi),
    "inference-models.json": (200, check_models),
    "inference-model.json": (200, check_one_model),
    "inference-chat.json": (200, check_chat),
    "inference-chat-stream.json": (200, check_chat_stream),
    "inference-chat-stream-function-url.json": (200, check_chat_stream),
    "inference-embeddings.json": (200, check_embeddings),
    "inference-chat-rest-v1.json": (200, check_chat),
    "inference-models-function-url.json": (200, check_models),
    "inference-chat-bad-request.json": (400, check_bad_request),
    "inference-tensorzero.json": (200, check_tensorzero_inference),
    "inference-lmi-predictions.json": (200, check_lmi_rolling),
    "inference-lmi-invocations-stream.json": (200, check_lmi_stream),
}
UNAUTHENTICATED_ROUTES = {"inference-health.json", "inference-openapi.json"}
TENSORZERO_ROUTES = {"inference-tensorzero.json"}
LMI_ROUTES = {"inference-lmi-predictions.json", "inference-lmi-invocations-stream.json"}
EVENT_NAMES = [path.name for path in kit.event_files()]


def stream_text(events: list[dict[str, Any]]) -> str:
    return "".join(choice["delta"].get("content") or "" for event in events for choice in event["choices"])


def is_rest_v1(event: dict[str, Any]) -> bool:
    return "httpMethod" in event and event.get("version") != "2.0"


def request_body(event: dict[str, Any]) -> dict[str, Any]:
    return json.loads(event["body"])


def proxy_response(result: dict[str, Any]) -> tuple[int, dict[str, str], str]:
    """Check the API Gateway proxy response shape; return status, headers, decoded body."""
    assert isinstance(result, dict), result
    assert isinstance(result.get("statusCode"), int), result
    assert isinstance(result.get("body", ""), str), result
    assert isinstance(result.get("isBase64Encoded", False), bool), result
    for field in ("headers", "multiValueHeaders"):
        if field in result and result[field] is not None:
            assert isinstance(result[field], dict), result
    headers = kit.response_headers(result)
    assert headers.get("x-request-id"), f"no x-request-id in {result}"
    return result["statusCode"], headers, kit.response_body_text(result)


def is_function_url(event: dict[str, Any]) -> bool:
    return ".lambda-url." in event.get("requestContext", {}).get("domainName", "")


def streamed_response(raw: bytes) -> tuple[int, dict[str, str], str]:
    """Check the streaming format's prelude; return status, headers, body."""
    prelude, body = kit.split_streamed_response(raw)
    assert isinstance(prelude.get("statusCode"), int), prelude
    assert set(prelude) <= {"statusCode", "headers", "cookies"}, prelude
    headers = {
        name.lower(): ",".join(value) if isinstance(value, list) else value
        for name, value in (prelude.get("headers") or {}).items()
    }
    assert headers.get("x-request-id"), f"no x-request-id in {prelude}"
    return prelude["statusCode"], headers, body.decode()


def invoke(function: kit.LambdaUnderRie, event: dict[str, Any]) -> tuple[int, dict[str, str], str]:
    # The streaming REST API (REST proxy events) and function URLs are answered in the streaming
    # format; the HTTP API with one proxy response.
    if is_function_url(event) or is_rest_v1(event):
        return streamed_response(function.invoke_raw(event))
    return proxy_response(function.invoke(event))


@pytest.fixture(scope="module")
def authed(aws_api_key: dict[str, Any]) -> Callable[[str], dict[str, Any]]:
    """Load an event file with the placeholder replaced by a real key."""
    return lambda name: kit.with_api_key(kit.load_event(name), aws_api_key["api_key"])


# --------------------------------------------------------------------------------------------
# The event files themselves (no processes needed)
# --------------------------------------------------------------------------------------------


def test_every_route_has_an_event_file_and_every_file_an_expectation() -> None:
    assert set(EVENT_NAMES) == set(EXPECTED), (
        f"missing event files: {sorted(set(EXPECTED) - set(EVENT_NAMES))}; "
        f"event files without expectations here: {sorted(set(EVENT_NAMES) - set(EXPECTED))}"
    )


@pytest.mark.parametrize("name", EVENT_NAMES)
def test_event_file_is_well_formed(name: str) -> None:
    event = kit.load_event(name)
    assert event.get("isBase64Encoded") is False
    if is_rest_v1(event):
        headers = event["headers"]
        assert headers.get("Authorization") == f"Bearer {kit.PLACEHOLDER_KEY}"
        assert event["multiValueHeaders"] == {k: [v] for k, v in headers.items()}
        context = event["requestContext"]
        assert context["httpMethod"] == event["httpMethod"]
        assert context["resourcePath"] == event["resource"]
        assert context["path"].endswith(event["path"])
        method = event["httpMethod"]
    else:
        assert event["version"] == "2.0"
        assert event["routeKey"] == "$default"
        headers = event["headers"]
        assert all(name == name.lower() for name in headers), "HTTP API v2 header names are lower case"
        assert headers.get("authorization") == f"Bearer {kit.PLACEHOLDER_KEY}"
        context = event["requestContext"]
        assert context["http"]["path"] == event["rawPath"]
        assert context["routeKey"] == "$default"
        assert context["stage"] == "$default"
        method = context["http"]["method"]
    lowered = {k.lower(): v for k, v in headers.items()}
    if method == "POST":
        json.loads(event["body"])  # every body is JSON, even the bad-request one (it lacks a field)
        assert lowered.get("content-type") == "application/json"
        if "content-length" in lowered:
            assert lowered["content-length"] == str(len(event["body"].encode()))
    else:
        assert not event.get("body")


# --------------------------------------------------------------------------------------------
# Invoking the function
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", EVENT_NAMES)
def test_event_under_the_rie(inference_lambda: kit.LambdaUnderRie, authed, name: str) -> None:
    expected_status, check = EXPECTED[name]
    event = authed(name)
    status, headers, body = invoke(inference_lambda, event)
    assert status == expected_status, f"{name}: HTTP {status}: {body}"
    check(body, headers)


@pytest.mark.parametrize("name", [n for n in EVENT_NAMES if n not in UNAUTHENTICATED_ROUTES])
def test_placeholder_key_is_rejected(inference_lambda: kit.LambdaUnderRie, name: str) -> None:
    status, headers, body = invoke(inference_lambda, kit.load_event(name))
    assert status == 401, f"{name}: HTTP {status}: {body}"
    error = json.loads(body)["error"]
    if name in TENSORZERO_ROUTES:
        # TensorZero's own routes answer in its shape: {"error": "<message>"}.
        assert isinstance(error, str) and "key" in error.lower(), error
        return
    if name in LMI_ROUTES:
        # The LMI API answers in LMI's shape: {"error": "<message>", "code": 401}.
        assert isinstance(error, str) and json.loads(body)["code"] == 401, body
        return
    assert error["code"] == "invalid_api_key", error
    assert set(error) >= {"message", "type", "param", "code"}


def test_missing_authorization_is_rejected(inference_lambda: kit.LambdaUnderRie) -> None:
    event = kit.without_authorization(kit.load_event("inference-chat.json"))
    status, _, body = invoke(inference_lambda, event)
    assert status == 401, body


def test_health_needs_no_key(inference_lambda: kit.LambdaUnderRie) -> None:
    status, _, body = invoke(inference_lambda, kit.without_authorization(kit.load_event("inference-health.json")))
    assert status == 200, body


def test_revoked_key_is_rejected(inference_lambda: kit.LambdaUnderRie, aws_cli: kit.NimbusCli) -> None:
    created = aws_cli.create_key("demo", name="revoked-before-use")
    aws_cli.revoke_key(created["key_id"])
    status, _, body = invoke(inference_lambda, kit.with_api_key(kit.load_event("inference-models.json"), created["api_key"]))
    assert status == 401, body


def test_keys_are_in_dynamodb(aws_cli: kit.NimbusCli, aws_api_key: dict[str, Any]) -> None:
    listed = {key["key_id"]: key for key in aws_cli.list_keys()}
    assert aws_api_key["key_id"] in listed
    assert listed[aws_api_key["key_id"]]["project"] == "demo"
    assert all("api_key" not in key for key in listed.values())


def test_chat_is_deterministic_across_invocations(inference_lambda: kit.LambdaUnderRie, authed) -> None:
    event = authed("inference-chat.json")
    first = json.loads(invoke(inference_lambda, event)[2])
    second = json.loads(invoke(inference_lambda, event)[2])
    assert first["choices"][0]["message"]["content"] == second["choices"][0]["message"]["content"]


def test_lambda_and_local_server_give_the_same_answer(
    inference_lambda: kit.LambdaUnderRie, authed, nimbus_server: kit.NimbusServer
) -> None:
    """The bundled config and the repo's config file drive the same deterministic dummy."""
    event = authed("inference-chat.json")
    from_lambda = json.loads(invoke(inference_lambda, event)[2])
    local = requests.post(f"{nimbus_server.api_base}/chat/completions", json=request_body(event), timeout=30)
    assert local.status_code == 200, local.text
    assert local.json()["choices"][0]["message"]["content"] == from_lambda["choices"][0]["message"]["content"]
    assert local.json()["usage"] == from_lambda["usage"]


def test_rest_v1_and_http_api_events_agree(inference_lambda: kit.LambdaUnderRie, authed) -> None:
    v2 = json.loads(invoke(inference_lambda, authed("inference-chat.json"))[2])
    status, _, body = invoke(inference_lambda, authed("inference-chat-rest-v1.json"))
    assert status == 200, body
    assert json.loads(body)["choices"][0]["message"]["content"] == v2["choices"][0]["message"]["content"]


def test_stream_event_matches_the_non_stream_answer(inference_lambda: kit.LambdaUnderRie, authed) -> None:
    stream_event = authed("inference-chat-stream.json")
    status, _, body = invoke(inference_lambda, stream_event)
    assert status == 200, body
    events, _ = kit.parse_sse(body)
    plain_body = {k: v for k, v in request_body(stream_event).items() if k not in {"stream", "stream_options"}}
    status, _, whole = invoke(inference_lambda, kit.with_body(stream_event, plain_body))
    assert status == 200, whole
    whole = json.loads(whole)
    assert stream_text(events) == whole["choices"][0]["message"]["content"]
    assert events[-1]["usage"] == whole["usage"]


def test_function_url_streams_the_same_answer_the_http_api_gives(inference_lambda: kit.LambdaUnderRie, authed) -> None:
    """The function URL's result is in the streaming format (prelude, separator, body); the
    HTTP API's is one proxy response. The deterministic dummy answers the same in both."""
    status, _, via_url = invoke(inference_lambda, authed("inference-chat-stream-function-url.json"))
    assert status == 200, via_url
    status, _, via_api = invoke(inference_lambda, authed("inference-chat-stream.json"))
    assert status == 200, via_api
    url_events, url_done = kit.parse_sse(via_url)
    api_events, api_done = kit.parse_sse(via_api)
    assert url_done and api_done
    assert stream_text(url_events) == stream_text(api_events)
    assert url_events[-1]["usage"] == api_events[-1]["usage"]


def test_function_url_answers_errors_in_the_streaming_format(inference_lambda: kit.LambdaUnderRie, authed) -> None:
    event = authed("inference-chat-stream-function-url.json")
    event = kit.with_body(event, {**request_body(event), "model": "no-such-model"})
    status, headers, body = invoke(inference_lambda, event)
    assert status == 404, body
    assert headers["content-type"].startswith("application/json")
    assert json.loads(body)["error"]["code"] == "model_not_found"


def test_the_after_response_extension_is_registered(inference_lambda: kit.LambdaUnderRie, authed) -> None:
    """The internal extension that finishes deferred work after each response: the RIE lists it,
    and invocations keep completing with it in place (every test here runs with it)."""
    status, _, _ = invoke(inference_lambda, authed("inference-models.json"))
    assert status == 200
    log = inference_lambda.process.log_path.read_text(errors="replace")
    assert "Internal agent nimbus-after-response" in log and "subscribed to [INVOKE]" in log, log[-3000:]
    assert "could not register the internal extension" not in log


def test_function_url_and_http_api_list_the_same_models(inference_lambda: kit.LambdaUnderRie, authed) -> None:
    via_api = json.loads(invoke(inference_lambda, authed("inference-models.json"))[2])
    via_url = json.loads(invoke(inference_lambda, authed("inference-models-function-url.json"))[2])
    assert [m["id"] for m in via_api["data"]] == [m["id"] for m in via_url["data"]]


@pytest.mark.parametrize(
    ("model", "status", "code"),
    [
        pytest.param("no-such-model", 404, "model_not_found", id="unknown-model"),
        pytest.param("dummy-error", 502, None, id="provider-error"),
    ],
)
def test_error_statuses_under_lambda(
    inference_lambda: kit.LambdaUnderRie, authed, model: str, status: int, code: str | None
) -> None:
    event = authed("inference-chat.json")
    event = kit.with_body(event, {**request_body(event), "model": model})
    got, headers, body = invoke(inference_lambda, event)
    assert got == status, body
    error = json.loads(body)["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    if code:
        assert error["code"] == code


def test_malformed_json_body_is_400(inference_lambda: kit.LambdaUnderRie, authed) -> None:
    status, _, body = invoke(inference_lambda, kit.with_body(authed("inference-chat.json"), '{"model": "dummy", '))
    assert status == 400, body
    assert json.loads(body)["error"]["type"] == "invalid_request_error"


def get_event(authed, path: str) -> dict[str, Any]:
    """A GET of `path` in the shape of the HTTP API event files."""
    event = authed("inference-models.json")
    event["rawPath"] = path
    event["requestContext"]["http"]["path"] = path
    return event


def test_tensorzero_inference_is_recorded_and_cached_in_moto(inference_lambda: kit.LambdaUnderRie, authed) -> None:
    """Records and cache entries are written after the response (by the after-response extension,
    which this RIE waits for) into DynamoDB/S3 on moto: the next invocation reads them."""
    event = authed("inference-tensorzero.json")
    body = json.loads(event["body"])
    body["cache_options"] = {"enabled": "on", "max_age_s": None}
    body["variant_name"] = "formal"
    # A request no other test sent (the default mode, write_only, caches every answer).
    body["input"]["messages"][0]["content"][0]["arguments"]["topic"] = f"topic {uuid.uuid4()}"
    first_status, _, first = invoke(inference_lambda, kit.with_body(event, body))
    assert first_status == 200, first
    first = json.loads(first)
    status, _, second = invoke(inference_lambda, kit.with_body(event, body))
    assert status == 200, second
    second = json.loads(second)
    assert second["content"] == first["content"]
    assert second["usage"] == {"input_tokens": 0, "output_tokens": 0}, second
    assert first["usage"]["input_tokens"] > 0
    status, _, record = invoke(inference_lambda, get_event(authed, f"/inferences/{first['inference_id']}"))
    assert status == 200, record
    record = json.loads(record)
    assert record["function_name"] == "draft_email" and record["variant_name"] == "formal"
    assert record["tags"] == {"source": "lambda-event"}
    assert record["model_calls"][0]["raw_request"], record
    status, _, episode = invoke(inference_lambda, get_event(authed, f"/episodes/{first['episode_id']}/inferences"))
    assert status == 200, episode
    assert [r["inference_id"] for r in json.loads(episode)["data"]] == [first["inference_id"]]
