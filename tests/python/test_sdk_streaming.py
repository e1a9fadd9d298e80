"""Streamed `/v1/chat/completions` (SSE) through the OpenAI SDK and on the wire."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
import requests

import nimbus_testkit as kit
from nimbus_testkit import WEATHER_TOOL, user


def stream_chunks(client: openai.OpenAI, **kwargs: Any) -> list[Any]:
    kwargs.setdefault("model", "dummy")
    with client.chat.completions.create(stream=True, **kwargs) as stream:
        return list(stream)


def text_of(chunks: list[Any]) -> str:
    return "".join(choice.delta.content or "" for chunk in chunks for choice in chunk.choices)


def finish_reasons(chunks: list[Any]) -> list[str]:
    return [choice.finish_reason for chunk in chunks for choice in chunk.choices if choice.finish_reason]


def check_chunk_basics(chunks: list[Any], model: str = "dummy") -> None:
    assert chunks, "no chunks"
    ids = {chunk.id for chunk in chunks}
    assert len(ids) == 1, f"chunk ids differ: {ids}"
    assert next(iter(ids)).startswith("chatcmpl-")
    assert {chunk.object for chunk in chunks} == {"chat.completion.chunk"}
    assert {chunk.model for chunk in chunks} == {model}
    assert len({chunk.created for chunk in chunks}) == 1
    first_choices = chunks[0].choices
    assert first_choices and first_choices[0].delta.role == "assistant"


MESSAGES = [{"role": "system", "content": "Reply briefly."}, *user("Explain server-sent events in a few words.")]


def test_stream_reassembles_to_the_non_stream_answer(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model="dummy", messages=MESSAGES)
    chunks = stream_chunks(client, messages=MESSAGES)
    check_chunk_basics(chunks)
    assert text_of(chunks) == whole.choices[0].message.content
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content_chunks) >= 2, "the answer should arrive in several chunks"
    assert finish_reasons(chunks) == ["stop"]
    assert chunks[-1].choices and chunks[-1].choices[0].finish_reason == "stop"
    # Without stream_options.include_usage there is no usage and no choice-less chunk.
    assert all(chunk.usage is None for chunk in chunks)
    assert all(chunk.choices for chunk in chunks)


def test_include_usage_adds_a_final_usage_chunk(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model="dummy", messages=MESSAGES)
    chunks = stream_chunks(client, messages=MESSAGES, stream_options={"include_usage": True})
    check_chunk_basics(chunks)
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens
    assert last.usage.completion_tokens == whole.usage.completion_tokens
    assert last.usage.total_tokens == whole.usage.total_tokens
    assert all(chunk.usage is None for chunk in chunks[:-1])
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert text_of(chunks) == whole.choices[0].message.content


def test_include_usage_false_behaves_like_no_options(client: openai.OpenAI) -> None:
    chunks = stream_chunks(client, messages=MESSAGES, stream_options={"include_usage": False})
    assert all(chunk.usage is None for chunk in chunks)
    assert all(chunk.choices for chunk in chunks)


def test_stream_is_deterministic(client: openai.OpenAI) -> None:
    assert text_of(stream_chunks(client, messages=MESSAGES)) == text_of(stream_chunks(client, messages=MESSAGES))


def test_stream_honours_max_tokens(client: openai.OpenAI) -> None:
    messages = user("Please write a long answer about clouds and weather patterns.")
    whole = client.chat.completions.create(model="dummy", messages=messages, max_tokens=2)
    chunks = stream_chunks(client, messages=messages, max_tokens=2, stream_options={"include_usage": True})
    assert finish_reasons(chunks) == ["length"]
    assert text_of(chunks) == whole.choices[0].message.content
    assert chunks[-1].usage.completion_tokens <= 2


def test_streamed_tool_call_matches_the_non_stream_one(client: openai.OpenAI) -> None:
    messages = user("Weather in Bergen for 2 days?")
    whole = client.chat.completions.create(model="dummy", messages=messages, tools=[WEATHER_TOOL], tool_choice="required")
    expected = whole.choices[0].message.tool_calls[0]
    chunks = stream_chunks(client, messages=messages, tools=[WEATHER_TOOL], tool_choice="required")
    check_chunk_basics(chunks)
    assert finish_reasons(chunks) == ["tool_calls"]
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += delta.id or ""
                if delta.function:
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
    assert list(calls) == [0]
    assert calls[0]["id"] == expected.id
    assert calls[0]["name"] == expected.function.name == "get_weather"
    assert json.loads(calls[0]["arguments"]) == json.loads(expected.function.arguments)


def test_fallback_model_streams(client: openai.OpenAI) -> None:
    chunks = stream_chunks(client, model="dummy-fallback", messages=MESSAGES)
    check_chunk_basics(chunks, model="dummy-fallback")
    assert text_of(chunks)
    assert finish_reasons(chunks) == ["stop"]


def test_unknown_model_fails_before_streaming(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        stream_chunks(client, model="no-such-model", messages=MESSAGES)
    assert raised.value.code == "model_not_found"


def test_failing_provider_fails_the_request_with_502(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as raised:
        stream_chunks(client, model="dummy-error", messages=MESSAGES)
    assert raised.value.status_code == 502


def test_sse_wire_format(nimbus_server: kit.NimbusServer) -> None:
    body = {"model": "dummy", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
    with requests.post(f"{nimbus_server.api_base}/chat/completions", json=body, stream=True, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers.get("x-request-id")
        text = response.content.decode()
    events, done = kit.parse_sse(text)
    assert done, f"stream did not end with [DONE]: {text[-200:]!r}"
    assert text.rstrip().endswith("data: [DONE]")
    assert len(events) >= 4
    assert events[-1]["choices"] == [] and events[-1]["usage"]["total_tokens"] > 0
    assert len({event["id"] for event in events}) == 1
