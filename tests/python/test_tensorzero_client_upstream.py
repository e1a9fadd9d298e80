"""What reaches a provider through `/inference`, seen at the recording upstream: `extra_body` and
`extra_headers` from the variant, the provider's config and the request (scoped to a variant, a
model, a model's provider, or always) with TensorZero's precedence (request > provider config >
variant config); dynamic credentials; raw responses; finish reasons the client accepts."""

from __future__ import annotations

import json
from typing import Any

from tensorzero import FinishReason, TensorZeroGateway

import tensorzero_kit as tzk
from mock_upstream import RecordedRequest, RecordingUpstream


def relay(tz: TensorZeroGateway, upstream: RecordingUpstream, **kwargs: Any) -> RecordedRequest:
    """One `relay` inference with a fresh marker; what the upstream received."""
    marker = tzk.tag()
    kwargs.setdefault("function_name", "relay")
    tz.inference(input=tzk.says(marker), **kwargs)
    return upstream.one_with_text(marker)


# --------------------------------------------------------------------------------------------
# extra_body / extra_headers
# --------------------------------------------------------------------------------------------


def test_the_configured_edits_reach_the_upstream_provider_over_variant(
    tz: TensorZeroGateway, tz_upstream: RecordingUpstream
) -> None:
    sent = relay(tz, tz_upstream)
    assert sent.body["from_variant"] == "variant"
    assert sent.body["from_provider"] == "provider"
    # Both set /layered: the provider's configuration beats the variant's.
    assert sent.body["layered"] == "provider"
    assert sent.body["temperature"] == 0.5
    assert sent.header_values("x-from-variant") == ["variant"]
    assert sent.header_values("x-layered") == ["variant"]


def test_request_edits_that_always_apply_beat_the_variants(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    sent = relay(
        tz,
        tz_upstream,
        extra_body=[
            {"pointer": "/layered", "value": "request"},
            {"pointer": "/temperature", "delete": True},
            {"pointer": "/metadata", "value": {"nested": [1, 2]}},
        ],
        extra_headers=[{"name": "x-layered", "value": "request"}, {"name": "x-from-variant", "delete": True}],
    )
    assert sent.body["layered"] == "request"
    assert sent.body["from_provider"] == "provider"
    assert "temperature" not in sent.body
    assert sent.body["metadata"] == {"nested": [1, 2]}
    assert sent.body["from_variant"] == "variant"
    assert sent.header_values("x-layered") == ["request"]
    assert sent.header_values("x-from-variant") == []


def test_the_provider_configs_headers_beat_the_variants_and_lose_to_the_requests(
    tz: TensorZeroGateway, tz_upstream: RecordingUpstream
) -> None:
    # `relay.upstream` sets x-provider-config = "variant"; the mock provider sets "provider".
    assert relay(tz, tz_upstream).header_values("x-provider-config") == ["provider"]
    overridden = relay(tz, tz_upstream, extra_headers=[{"name": "x-provider-config", "value": "request"}])
    assert overridden.header_values("x-provider-config") == ["request"]


def test_variant_scoped_request_edits_apply_only_to_that_variant(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    edits = {
        "extra_body": [
            {"variant_name": "upstream", "pointer": "/for_upstream", "value": True},
            {"variant_name": "spare", "pointer": "/for_spare", "value": True},
        ],
        "extra_headers": [
            {"variant_name": "upstream", "name": "x-for-upstream", "value": "yes"},
            {"variant_name": "spare", "name": "x-for-spare", "value": "yes"},
        ],
    }
    on_upstream = relay(tz, tz_upstream, **edits)
    assert on_upstream.body.get("for_upstream") is True and "for_spare" not in on_upstream.body
    assert on_upstream.header_values("x-for-upstream") == ["yes"] and on_upstream.header_values("x-for-spare") == []
    on_spare = relay(tz, tz_upstream, variant_name="spare", **edits)
    assert on_spare.body.get("for_spare") is True and "for_upstream" not in on_spare.body
    assert "from_variant" not in on_spare.body
    assert on_spare.header_values("x-for-spare") == ["yes"] and on_spare.header_values("x-for-upstream") == []


def test_model_scoped_request_edits_apply_only_to_that_model(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    sent = relay(
        tz,
        tz_upstream,
        extra_body=[
            {"model_name": "mock", "pointer": "/for_mock", "value": 1},
            {"model_name": "dummy", "pointer": "/for_dummy", "value": 1},
        ],
        extra_headers=[
            {"model_name": "mock", "name": "x-for-mock", "value": "1"},
            {"model_name": "dummy", "name": "x-for-dummy", "value": "1"},
        ],
    )
    assert sent.body.get("for_mock") == 1 and "for_dummy" not in sent.body
    assert sent.header_values("x-for-mock") == ["1"] and sent.header_values("x-for-dummy") == []


def test_provider_scoped_request_edits_apply_only_to_that_provider(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    sent = relay(
        tz,
        tz_upstream,
        extra_body=[{"model_name": "mock", "provider_name": "mock", "pointer": "/for_provider", "value": 1}],
        extra_headers=[{"model_name": "mock", "provider_name": "mock", "name": "x-for-provider", "value": "1"}],
    )
    assert sent.body.get("for_provider") == 1
    assert sent.header_values("x-for-provider") == ["1"]


def test_edits_scoped_to_a_model_or_provider_that_does_not_exist_are_400s(tz: TensorZeroGateway) -> None:
    """TensorZero refuses an edit whose scope names nothing it could ever apply to."""
    no_provider = [{"model_name": "mock", "provider_name": "elsewhere", "pointer": "/x", "value": 1}]
    message = tzk.expect_error(400, tz.inference, function_name="relay", input=tzk.says("x"), extra_body=no_provider)
    assert "elsewhere" in message
    no_model = [{"model_name": "no-such-model", "name": "x-a", "value": "1"}]
    message = tzk.expect_error(400, tz.inference, function_name="relay", input=tzk.says("x"), extra_headers=no_model)
    assert "no-such-model" in message


def test_edits_apply_to_model_name_inferences_too(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    sent = relay(
        tz,
        tz_upstream,
        function_name=None,
        model_name="mock",
        extra_body=[{"model_name": "mock", "pointer": "/scoped", "value": "m"}, {"pointer": "/always", "value": "a"}],
        extra_headers=[{"name": "x-always", "value": "a"}],
    )
    assert (sent.body["scoped"], sent.body["always"]) == ("m", "a")
    assert sent.header_values("x-always") == ["a"]


def test_an_edit_naming_a_variant_the_function_lacks_is_a_400(tz: TensorZeroGateway) -> None:
    message = tzk.expect_error(
        400,
        tz.inference,
        function_name="relay",
        input=tzk.says("x"),
        extra_body=[{"variant_name": "no_such_variant", "pointer": "/a", "value": 1}],
    )
    assert "no_such_variant" in message


# --------------------------------------------------------------------------------------------
# Dynamic credentials
# --------------------------------------------------------------------------------------------


def test_a_dynamic_credential_reaches_the_upstream_as_the_bearer(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    sent = relay(tz, tz_upstream, function_name="relay_keyed", credentials={"mock_key": "sk-dynamic-123"})
    assert sent.headers["authorization"] == "Bearer sk-dynamic-123"
    assert sent.body["model"] == "mock-keyed-model"
    streamed_marker = tzk.tag()
    list(
        tz.inference(
            function_name="relay_keyed", input=tzk.says(streamed_marker), credentials={"mock_key": "sk-x"}, stream=True
        )
    )
    assert tz_upstream.one_with_text(streamed_marker).headers["authorization"] == "Bearer sk-x"


def test_a_provider_without_a_key_sends_no_authorization(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    sent = relay(tz, tz_upstream, credentials={"mock_key": "unused"})
    assert "authorization" not in sent.headers


# --------------------------------------------------------------------------------------------
# What comes back
# --------------------------------------------------------------------------------------------


def test_the_original_and_raw_responses_are_the_upstreams(tz: TensorZeroGateway) -> None:
    response = tz.inference(
        function_name="relay", input=tzk.says(tzk.tag()), include_original_response=True, include_raw_response=True
    )
    original = json.loads(response.original_response)
    assert original["choices"][0]["message"]["content"] == "Hello from choice 0"
    assert response.raw_response is not None and len(response.raw_response) == 1
    assert json.loads(response.raw_response[0].data) == original


def test_raw_usage_is_the_upstreams_usage_object(tz: TensorZeroGateway) -> None:
    response = tz.inference(function_name="relay", input=tzk.says(tzk.tag()), include_raw_usage=True)
    [entry] = response.raw_usage
    assert entry.data == {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}
    assert entry.api_type == "chat_completions"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (4, 4)


def test_an_upstream_finish_reason_outside_tensorzeros_set_is_unknown(tz: TensorZeroGateway) -> None:
    # TGI's eos_token: the client raises on anything outside its enum, so it must arrive as unknown.
    response = tz.inference(function_name="relay", input=tzk.says("[finish:eos_token]"))
    assert response.finish_reason == FinishReason.UNKNOWN
    tool_calls = tz.inference(function_name="relay", input=tzk.says("[finish:tool_calls]"))
    assert tool_calls.finish_reason == FinishReason.TOOL_CALL
    chunks = list(tz.inference(function_name="relay", input=tzk.says("[finish:content_filter]"), stream=True))
    assert [c.finish_reason for c in chunks if c.finish_reason] == [FinishReason.CONTENT_FILTER]
