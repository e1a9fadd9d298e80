"""What TensorZero's own gateway sends and answers for the same config, upstream and requests, checked
on Nimbus with the real `tensorzero` client (and the OpenAI client on `/openai/v1`) against the
recording upstream: the fidelity items of issue #30 §1."""

from __future__ import annotations

import json
from typing import Any

import openai
import requests
from tensorzero import TensorZeroGateway

import nimbus_testkit as kit
import tensorzero_kit as tzk
from mock_upstream import REASONING, RecordingUpstream


def sent_for(upstream: RecordingUpstream, marker: str) -> dict[str, Any]:
    return upstream.one_with_text(marker).body


def test_a_json_schema_response_format_on_a_model_reaches_the_upstream(
    tz_server: kit.NimbusServer, tz_upstream: RecordingUpstream
) -> None:
    schema = {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "string"}}}
    marker = tzk.tag()
    client = openai.OpenAI(base_url=f"{tz_server.base_url}/openai/v1", api_key="unused")
    client.chat.completions.create(
        model="tensorzero::model_name::mock",
        messages=[{"role": "user", "content": marker}],
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}},
    )
    format_sent = sent_for(tz_upstream, marker)["response_format"]
    assert format_sent["type"] == "json_schema"
    assert format_sent["json_schema"]["schema"] == schema
    assert list(format_sent["json_schema"]["schema"]["properties"]) == ["zeta", "alpha"]


def test_json_mode_on_asks_for_json_in_the_prompt_unless_it_already_does(
    tz: TensorZeroGateway, tz_upstream: RecordingUpstream
) -> None:
    marker = tzk.tag()
    tz.inference(function_name="json_relay", input=tzk.says(marker))
    messages = sent_for(tz_upstream, marker)["messages"]
    assert messages[0]["role"] == "system" and "json" in messages[0]["content"].lower()
    mentioned = tzk.tag()
    tz.inference(function_name="json_relay", input=tzk.says(f"{mentioned} answer in JSON"))
    assert [m["role"] for m in sent_for(tz_upstream, mentioned)["messages"]] == ["user"]


def test_keys_reach_the_upstream_in_the_order_they_were_written(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    marker = tzk.tag()
    tz.inference(function_name="json_ordered_relay", input=tzk.says(marker))
    schema = sent_for(tz_upstream, marker)["response_format"]["json_schema"]["schema"]
    assert list(schema["properties"]) == ["zeta", "alpha", "middle"]
    assert list(schema["properties"]["middle"]["properties"]) == ["z", "a"]
    tool_marker = tzk.tag()
    parameters = {"type": "object", "properties": {"when": {"type": "string"}, "city": {"type": "string"}}}
    tz.inference(
        model_name="mock",
        input=tzk.says(tool_marker),
        additional_tools=[{"name": "ordered", "description": "d", "parameters": parameters}],
        extra_body=[{"pointer": "/metadata", "value": {"b": 1, "a": 2}}],
    )
    sent = sent_for(tz_upstream, tool_marker)
    assert list(sent["tools"][0]["function"]["parameters"]["properties"]) == ["when", "city"]
    assert list(sent["metadata"]) == ["b", "a"]


def test_upstream_reasoning_becomes_thought_blocks_and_chunks(tz: TensorZeroGateway) -> None:
    response = tz.inference(function_name="relay", input=tzk.says(f"{tzk.tag()} [reasoning]"))
    thoughts = [block.text for block in response.content if block.type == "thought"]
    assert thoughts == [REASONING]
    assert tzk.text_of(response) == "Hello from choice 0"
    chunks = list(tz.inference(function_name="relay", input=tzk.says(f"{tzk.tag()} [reasoning]"), stream=True))
    streamed = "".join(piece.text for chunk in chunks for piece in chunk.content if piece.type == "thought")
    assert streamed == REASONING


def test_raw_entries_name_the_providers_type(tz: TensorZeroGateway) -> None:
    response = tz.inference(function_name="relay", input=tzk.says(tzk.tag()), include_raw_response=True, include_raw_usage=True)
    assert [entry.provider_type for entry in response.raw_response] == ["openai"]
    assert [entry.provider_type for entry in response.raw_usage] == ["openai"]


def test_reserved_tags_are_a_400(tz: TensorZeroGateway) -> None:
    message = tzk.expect_error(400, tz.inference, function_name="plain_chat", input=tzk.says("x"), tags={"tensorzero::x": "1"})
    assert "tensorzero::x" in message


def test_the_token_cap_is_max_completion_tokens_unless_the_provider_says_otherwise(
    tz: TensorZeroGateway, tz_upstream: RecordingUpstream
) -> None:
    marker = tzk.tag()
    tz.inference(model_name="mock", input=tzk.says(marker), params={"chat_completion": {"max_tokens": 5}})
    sent = sent_for(tz_upstream, marker)
    assert sent["max_completion_tokens"] == 5 and "max_tokens" not in sent
    old = tzk.tag()
    tz.inference(model_name="mock-old-server", input=tzk.says(old), params={"chat_completion": {"max_tokens": 5}})
    sent = sent_for(tz_upstream, old)
    assert sent["max_tokens"] == 5 and "max_completion_tokens" not in sent


def test_a_stream_with_include_original_response_carries_each_upstream_chunk(tz: TensorZeroGateway) -> None:
    chunks = list(tz.inference(function_name="relay", input=tzk.says(tzk.tag()), stream=True, include_original_response=True))
    originals = [json.loads(chunk.original_chunk) for chunk in chunks if chunk.original_chunk]
    assert originals and all(o["object"] == "chat.completion.chunk" for o in originals)
    assert "".join(piece.text for chunk in chunks for piece in chunk.content if piece.type == "text") == "Hello from choice 0"


def test_one_attempt_per_provider_by_default(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    marker = f"[fail-times:1:{tzk.tag()}]"
    tzk.expect_error(502, tz.inference, model_name="mock", input=tzk.says(marker))
    assert len(tz_upstream.with_text(marker)) == 1


def test_reasoning_keys_of_the_variant_and_their_overrides_reach_openai(
    tz: TensorZeroGateway, tz_upstream: RecordingUpstream
) -> None:
    marker = tzk.tag()
    tz.inference(function_name="reasoning_relay", input=tzk.says(marker))
    sent = sent_for(tz_upstream, marker)
    assert (sent["reasoning_effort"], sent["service_tier"], sent["verbosity"]) == ("low", "flex", "high")
    assert sent["max_completion_tokens"] == 64
    assert "thinking_budget_tokens" not in sent  # OpenAI has none: ignored, as TensorZero does
    overridden = tzk.tag()
    params = {"reasoning_effort": "high", "service_tier": "priority", "verbosity": "low", "thinking_budget_tokens": 9}
    tz.inference(function_name="reasoning_relay", input=tzk.says(overridden), params={"chat_completion": params})
    sent = sent_for(tz_upstream, overridden)
    assert (sent["reasoning_effort"], sent["service_tier"], sent["verbosity"]) == ("high", "priority", "low")



def test_a_service_tier_outside_tensorzeros_values_is_a_400(tz_server: kit.NimbusServer) -> None:
    # The client itself refuses it, so it goes as the client's body would.
    body = tzk.client_body(function_name="reasoning_relay", params={"chat_completion": {"service_tier": "fastest"}})
    response = requests.post(f"{tz_server.base_url}/inference", json=body, timeout=30)
    assert response.status_code == 400 and "service_tier" in response.text, response.text
