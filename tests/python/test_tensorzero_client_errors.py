"""Every error status of `/inference` as the real `tensorzero` client sees it: `TensorZeroError`
with `.status_code` and TensorZeroError's body `{"error": "<message>"}` in `.text`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import requests
from tensorzero import TensorZeroGateway

import nimbus_testkit as kit
import tensorzero_kit as tzk


def inference(tz: TensorZeroGateway, **kwargs):  # noqa: ANN201 - the client's own union
    kwargs.setdefault("input", tzk.says("Hello"))
    return tz.inference(**kwargs)


# 400 ----------------------------------------------------------------------------------------


def test_an_unknown_field_is_a_400_naming_it(tz_server: kit.NimbusServer) -> None:
    # The typed client cannot send one (it checks its own arguments): the same body by hand.
    for field, body in [
        ("temprature", tzk.client_body(function_name="plain_chat", temprature=0.2)),
        ("temprature", tzk.client_body(function_name="plain_chat", params={"chat_completion": {"temprature": 0.2}})),
        ("ttl", tzk.client_body(function_name="plain_chat", cache_options={"enabled": "on", "ttl": 5})),
    ]:
        response = requests.post(f"{tz_server.base_url}/inference", json=body, timeout=30)
        assert response.status_code == 400, response.text
        assert set(response.json()) == {"error"}
        assert field in response.json()["error"]


def test_a_bad_schema_in_the_request_is_a_400_naming_the_field(tz: TensorZeroGateway) -> None:
    message = tzk.expect_error(400, inference, tz, function_name="extract_contact", output_schema={"type": 12})
    assert "output_schema" in message
    bad_tool = {"name": "broken", "description": "d", "parameters": {"type": "nonsense"}}
    message = tzk.expect_error(400, inference, tz, function_name="plain_chat", additional_tools=[bad_tool])
    assert "broken" in message and "parameters" in message


def test_episode_ids_must_be_current_uuidv7(tz: TensorZeroGateway, tz_server: kit.NimbusServer) -> None:
    message = tzk.expect_error(400, inference, tz, function_name="plain_chat", episode_id=uuid.uuid4())
    assert "Version must be 7" in message
    # Before 2020-01-23 (TensorZero's earliest allowed timestamp), and in the future.
    too_early = tzk.uuid7_at(1_500_000_000_000)
    assert "too early" in tzk.expect_error(400, inference, tz, function_name="plain_chat", episode_id=too_early)
    in_future = tzk.uuid7_at(int(time.time() * 1000) + 3_600_000)
    assert "future" in tzk.expect_error(400, inference, tz, function_name="plain_chat", episode_id=in_future)
    # Not a UUID at all (the client refuses to send that itself).
    body = tzk.client_body(function_name="plain_chat", episode_id="not-a-uuid")
    response = requests.post(f"{tz_server.base_url}/inference", json=body, timeout=30)
    assert response.status_code == 400 and "episode" in response.json()["error"].lower(), response.text


def test_input_that_fails_a_schema_is_a_400(tz: TensorZeroGateway) -> None:
    message = tzk.expect_error(
        400, inference, tz, function_name="draft_email", input=tzk.email_input(system={"sender": "Ada"})
    )
    assert "input.system" in message
    message = tzk.expect_error(
        400, inference, tz, function_name="draft_email", input=tzk.email_input(user={"recipient": "Bob"})
    )
    assert "input.messages[0].content[0]" in message


def test_text_to_a_function_with_a_user_schema_is_a_400(tz: TensorZeroGateway) -> None:
    message = tzk.expect_error(
        400, inference, tz, function_name="draft_email", input=tzk.says("Write it", system=tzk.EMAIL_SYSTEM)
    )
    assert "schema" in message


def test_a_missing_system_for_a_system_schema_is_a_400(tz: TensorZeroGateway) -> None:
    message = tzk.expect_error(
        400,
        inference,
        tz,
        function_name="draft_email",
        input={"messages": [{"role": "user", "content": [{"type": "text", "arguments": tzk.EMAIL_USER}]}]},
    )
    assert "input.system" in message


def test_function_name_and_model_name_together_or_neither_are_400s(tz: TensorZeroGateway) -> None:
    assert "model_name" in tzk.expect_error(400, inference, tz, function_name="plain_chat", model_name="dummy")
    assert "model_name" in tzk.expect_error(400, inference, tz)


def test_fields_nimbus_does_not_do_are_400s_naming_them(tz: TensorZeroGateway) -> None:
    assert "namespace" in tzk.expect_error(400, inference, tz, function_name="plain_chat", namespace="team-a")
    message = tzk.expect_error(
        400, inference, tz, function_name="plain_chat", provider_tools=[{"tool": {"type": "web_search"}}]
    )
    assert "provider_tools" in message
    # Raw provider data comes with whole answers, not streamed ones (streamed chunks carry their
    # `original_chunk` with include_original_response).
    for field in ("include_raw_usage", "include_raw_response"):
        message = tzk.expect_error(400, inference, tz, function_name="plain_chat", stream=True, **{field: True})
        assert field in message


def test_a_missing_dynamic_credential_is_a_400(tz: TensorZeroGateway) -> None:
    message = tzk.expect_error(400, inference, tz, function_name="relay_keyed")
    assert "mock_key" in message


# 404 ----------------------------------------------------------------------------------------


def test_unknown_function_and_variant_are_404s(tz: TensorZeroGateway) -> None:
    assert "no_such_function" in tzk.expect_error(404, inference, tz, function_name="no_such_function")
    assert "no_such_variant" in tzk.expect_error(
        404, inference, tz, function_name="draft_email", variant_name="no_such_variant", input=tzk.email_input()
    )


def test_an_unknown_model_name_is_a_400_as_in_tensorzero(tz: TensorZeroGateway) -> None:
    message = tzk.expect_error(400, inference, tz, model_name="no-such-model")
    assert "no-such-model" in message and "not found in the model table" in message


# 408 / 502 ----------------------------------------------------------------------------------


def test_a_variant_timeout_is_a_408(tz: TensorZeroGateway) -> None:
    message = tzk.expect_error(408, inference, tz, function_name="impatient")
    assert "hurried" in message


def test_every_variant_failing_is_a_502_listing_them(tz: TensorZeroGateway) -> None:
    message = tzk.expect_error(502, inference, tz, function_name="always_fails")
    assert "first" in message and "second" in message


def test_an_upstream_failure_is_a_502(tz: TensorZeroGateway) -> None:
    message = tzk.expect_error(502, inference, tz, model_name="mock", input=tzk.says("[upstream-fails]"))
    assert "mock" in message


# 401 ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(server_factory: Callable[..., kit.NimbusServer]) -> tuple[kit.NimbusServer, str]:
    """A server that requires an API key, and that key."""
    created: dict[str, Any] = {}
    server = server_factory("nimbus-tensorzero-keyed", before_start=lambda cli: created.update(cli.create_key("tz")))
    return server, created["api_key"]


def test_the_clients_api_key_is_the_bearer_and_a_missing_or_wrong_one_is_a_401(
    keyed: tuple[kit.NimbusServer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, api_key = keyed
    monkeypatch.delenv("TENSORZERO_API_KEY", raising=False)
    with TensorZeroGateway.build_http(gateway_url=server.base_url, api_key=api_key) as client:
        assert client.inference(model_name="dummy", input=tzk.says("Hi")).variant_name == "dummy"
    for wrong in (None, "nmb_not_a_key"):
        with TensorZeroGateway.build_http(gateway_url=server.base_url, api_key=wrong) as client:
            message = tzk.expect_error(401, client.inference, model_name="dummy", input=tzk.says("Hi"))
            assert "API key" in message
