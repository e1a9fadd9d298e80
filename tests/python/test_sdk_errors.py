"""Errors: the OpenAI envelope, status codes, `param`, and how the SDK surfaces them."""

from __future__ import annotations

from typing import Any

import openai
import pytest
import requests

import nimbus_testkit as kit

HELLO = [{"role": "user", "content": "hello"}]


def post_chat(server: kit.NimbusServer, body: Any, **kwargs: Any) -> requests.Response:
    url = f"{server.api_base}/chat/completions"
    if isinstance(body, (str, bytes)):
        return requests.post(url, data=body, headers={"content-type": "application/json"}, timeout=30, **kwargs)
    return requests.post(url, json=body, timeout=30, **kwargs)


def test_unknown_model_is_404_model_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(model="gpt-nonexistent", messages=HELLO)
    err = raised.value
    assert err.status_code == 404
    assert err.code == "model_not_found"
    assert err.param == "model"
    assert err.type == "invalid_request_error"
    assert "gpt-nonexistent" in err.message
    envelope = kit.error_envelope(err.response)
    assert envelope["code"] == "model_not_found"
    assert err.request_id, "error responses carry x-request-id too"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param({"model": "dummy"}, "messages", id="no-messages"),
        pytest.param({"messages": HELLO}, "model", id="no-model"),
    ],
)
def test_missing_required_field_names_it(nimbus_server: kit.NimbusServer, body: dict[str, Any], param: str) -> None:
    response = post_chat(nimbus_server, body)
    assert response.status_code == 400, response.text
    error = kit.error_envelope(response)
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert response.headers.get("x-request-id")


def test_missing_nested_field_through_the_sdk(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="dummy", messages=[{"role": "user"}])  # no content
    param = raised.value.param or ""
    assert param.startswith("messages[0]") and "content" in param, param


@pytest.mark.parametrize(
    ("body", "param_prefix"),
    [
        pytest.param({"model": "dummy", "messages": [{"role": 5, "content": "hi"}]}, "messages[0]", id="role-number"),
        pytest.param({"model": "dummy", "messages": [{"role": "robot", "content": "hi"}]}, "messages[0]", id="role-unknown"),
        pytest.param({"model": "dummy", "messages": [{"role": "user", "content": 5}]}, "messages[0]", id="content-number"),
        pytest.param({"model": "dummy", "messages": "hello"}, "messages", id="messages-string"),
        pytest.param({"model": 7, "messages": HELLO}, "model", id="model-number"),
        pytest.param({"model": "dummy", "messages": HELLO, "temperature": "hot"}, "temperature", id="temperature-string"),
        pytest.param({"model": "dummy", "messages": HELLO, "max_tokens": -1}, "max_tokens", id="max_tokens-negative"),
        pytest.param({"model": "dummy", "messages": HELLO, "stream": "yes"}, "stream", id="stream-string"),
    ],
)
def test_wrong_type_names_the_path(nimbus_server: kit.NimbusServer, body: dict[str, Any], param_prefix: str) -> None:
    response = post_chat(nimbus_server, body)
    assert response.status_code == 400, response.text
    error = kit.error_envelope(response)
    assert (error["param"] or "").startswith(param_prefix), error


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param('{"model": "dummy", "messages": [', id="truncated"),
        pytest.param("{not json}", id="garbage"),
        pytest.param("", id="empty"),
        pytest.param("[1, 2, 3]", id="array"),
        pytest.param("null", id="null"),
    ],
)
def test_malformed_json_is_400(nimbus_server: kit.NimbusServer, raw: str) -> None:
    response = post_chat(nimbus_server, raw)
    assert response.status_code == 400, response.text
    error = kit.error_envelope(response)
    assert error["type"] == "invalid_request_error"
    assert response.headers.get("x-request-id")


def test_out_of_range_value_is_sdk_bad_request(client: openai.OpenAI) -> None:
    # A value the SDK cannot check client-side maps to BadRequestError with the parameter named.
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="dummy", messages=HELLO, temperature=5)
    assert raised.value.status_code == 400
    assert raised.value.param == "temperature"


def test_empty_messages_is_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="dummy", messages=[])
    assert raised.value.param == "messages"


def test_provider_failure_is_502_with_the_provider_message(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as raised:
        client.chat.completions.create(model="dummy-error", messages=HELLO)
    err = raised.value
    assert err.status_code == 502
    error = kit.error_envelope(err.response)
    # The configured failure is an HTTP 500 from the provider; its message reaches the client.
    assert "500" in error["message"], error
    assert err.request_id


def test_fallback_hides_the_failing_provider(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="dummy-fallback", messages=HELLO)
    assert completion.choices[0].message.content


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("GET", "/v1/nope", 404, id="unknown-route"),
        pytest.param("GET", "/v1/chat/completions", 405, id="wrong-method"),
    ],
)
def test_routing_errors_use_the_envelope(nimbus_server: kit.NimbusServer, method: str, path: str, status: int) -> None:
    response = requests.request(method, f"{nimbus_server.base_url}{path}", timeout=10)
    assert response.status_code == status, response.text
    kit.error_envelope(response)
    assert response.headers.get("x-request-id")


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda c: c.models.with_raw_response.list(), id="models"),
        pytest.param(lambda c: c.chat.completions.with_raw_response.create(model="dummy", messages=HELLO), id="chat"),
        pytest.param(
            lambda c: c.embeddings.with_raw_response.create(model="dummy-embedding", input="x"), id="embeddings"
        ),
    ],
)
def test_every_success_has_a_request_id(client: openai.OpenAI, call: Any) -> None:
    raw = call(client)
    assert raw.headers.get("x-request-id")
    raw.parse()


def test_request_ids_are_unique(nimbus_server: kit.NimbusServer) -> None:
    ids = {requests.get(f"{nimbus_server.base_url}/health", timeout=10).headers.get("x-request-id") for _ in range(5)}
    assert None not in ids
    assert len(ids) == 5
