"""Non-streamed `/v1/chat/completions` through the OpenAI SDK, on the deterministic dummy models."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest

import nimbus_testkit as kit

WEATHER_TOOL = kit.WEATHER_TOOL
TIME_TOOL = kit.TIME_TOOL
user = kit.user


def chat(client: openai.OpenAI, messages: list[dict[str, Any]], model: str = "dummy", **kwargs: Any):
    return client.chat.completions.create(model=model, messages=messages, **kwargs)


def content_of(completion) -> str:
    content = completion.choices[0].message.content
    assert isinstance(content, str), completion
    return content


def test_completion_shape_and_usage(client: openai.OpenAI) -> None:
    completion = chat(client, user("Describe Nimbus in one sentence."))
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == "dummy"
    assert isinstance(completion.created, int) and completion.created > 0
    assert len(completion.choices) == 1
    choice = completion.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert content_of(completion).strip()
    assert choice.finish_reason == "stop"
    assert not choice.message.tool_calls
    usage = completion.usage
    assert usage is not None
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_same_request_gives_same_content(client: openai.OpenAI) -> None:
    messages = [{"role": "system", "content": "Be terse."}, *user("What is the capital of Norway?")]
    first = chat(client, messages)
    second = chat(client, messages)
    assert content_of(first) == content_of(second)
    assert first.usage.model_dump() == second.usage.model_dump()


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(user("What is the capital of Sweden?"), id="other-user-text"),
        pytest.param([{"role": "system", "content": "Be verbose."}, *user("What is the capital of Norway?")], id="other-system"),
        pytest.param(
            [
                {"role": "system", "content": "Be terse."},
                *user("What is the capital of Norway?"),
                {"role": "assistant", "content": "Oslo."},
                *user("And its population?"),
            ],
            id="longer-conversation",
        ),
    ],
)
def test_different_inputs_give_different_content(client: openai.OpenAI, variant: list[dict[str, Any]]) -> None:
    baseline = content_of(chat(client, [{"role": "system", "content": "Be terse."}, *user("What is the capital of Norway?")]))
    assert content_of(chat(client, variant)) != baseline


def test_prompt_tokens_grow_with_the_prompt(client: openai.OpenAI) -> None:
    short = chat(client, user("Hello."))
    long = chat(client, user("Hello. " + "Tell me everything you know about serverless inference gateways. " * 5))
    assert long.usage.prompt_tokens > short.usage.prompt_tokens


@pytest.mark.parametrize("limit_field", ["max_tokens", "max_completion_tokens"])
def test_output_token_limit_truncates_with_length(client: openai.OpenAI, limit_field: str) -> None:
    messages = user("Please write a long answer about clouds and weather patterns.")
    full = chat(client, messages)
    assert full.usage.completion_tokens > 2, "baseline too short to show truncation"
    cut = chat(client, messages, **{limit_field: 2})
    assert cut.choices[0].finish_reason == "length"
    assert cut.usage.completion_tokens <= 2
    assert cut.usage.total_tokens == cut.usage.prompt_tokens + cut.usage.completion_tokens
    truncated = content_of(cut)
    assert truncated and len(truncated) < len(content_of(full))
    assert content_of(full).startswith(truncated)


def test_generous_token_limit_changes_nothing(client: openai.OpenAI) -> None:
    messages = user("Short question?")
    full = chat(client, messages)
    roomy = chat(client, messages, max_tokens=4000)
    assert roomy.choices[0].finish_reason == "stop"
    assert content_of(roomy) == content_of(full)


def test_tool_choice_required_returns_one_tool_call(client: openai.OpenAI) -> None:
    completion = chat(client, user("What's the weather in Oslo for 3 days?"), tools=[WEATHER_TOOL], tool_choice="required")
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 1
    call = calls[0]
    assert call.type == "function"
    assert call.id
    assert call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    assert isinstance(arguments, dict)
    assert {"city", "days"} <= set(arguments), arguments
    assert not choice.message.content


def test_named_tool_choice_calls_that_tool(client: openai.OpenAI) -> None:
    completion = chat(
        client,
        user("What time is it in Tokyo?"),
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    assert completion.choices[0].finish_reason == "tool_calls"
    calls = completion.choices[0].message.tool_calls
    assert calls is not None and len(calls) == 1
    assert calls[0].function.name == "get_time"
    assert "zone" in json.loads(calls[0].function.arguments)


@pytest.mark.parametrize("tool_choice", ["none", "auto", None])
def test_tools_without_forced_choice_answer_in_text(client: openai.OpenAI, tool_choice: str | None) -> None:
    kwargs: dict[str, Any] = {"tools": [WEATHER_TOOL]}
    if tool_choice is not None:
        kwargs["tool_choice"] = tool_choice
    completion = chat(client, user("Just say hi."), **kwargs)
    assert completion.choices[0].finish_reason == "stop"
    assert content_of(completion)
    assert not completion.choices[0].message.tool_calls


def test_tool_round_trip_history_is_accepted(client: openai.OpenAI) -> None:
    question = user("What's the weather in Oslo for 2 days?")
    first = chat(client, question, tools=[WEATHER_TOOL], tool_choice="required")
    call = first.choices[0].message.tool_calls[0]
    history = [
        *question,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"forecast": "sunny", "high_c": 21})},
    ]
    answer = chat(client, history, tools=[WEATHER_TOOL])
    assert answer.choices[0].finish_reason == "stop"
    assert content_of(answer)
    # The tool result is part of the input: a different result gives a different answer.
    history[-1] = {**history[-1], "content": json.dumps({"forecast": "snow", "high_c": -4})}
    assert content_of(chat(client, history, tools=[WEATHER_TOOL])) != content_of(answer)


def test_content_parts_and_developer_role_are_accepted(client: openai.OpenAI) -> None:
    completion = chat(
        client,
        [
            {"role": "developer", "content": "Answer in English."},
            {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]},
        ],
    )
    assert content_of(completion)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"temperature": 0.7}, id="temperature"),
        pytest.param({"temperature": 0}, id="temperature-zero"),
        pytest.param({"top_p": 0.9}, id="top_p"),
        pytest.param({"seed": 42}, id="seed"),
        pytest.param({"stop": ["\n\n", "END"]}, id="stop-list"),
        pytest.param({"stop": "END"}, id="stop-string"),
        pytest.param({"presence_penalty": 0.5, "frequency_penalty": 0.5}, id="penalties"),
        pytest.param({"user": "user-1234"}, id="user"),
        pytest.param({"n": 1}, id="n-1"),
        pytest.param({"logit_bias": {"50256": -100}}, id="logit_bias"),
        pytest.param({"parallel_tool_calls": False, "tools": [WEATHER_TOOL]}, id="parallel_tool_calls"),
        pytest.param({"metadata": {"purpose": "test"}}, id="metadata"),
        pytest.param({"response_format": {"type": "text"}}, id="response_format-text"),
    ],
)
def test_optional_parameters_are_accepted(client: openai.OpenAI, kwargs: dict[str, Any]) -> None:
    completion = chat(client, user("Give me a fun fact."), **kwargs)
    assert content_of(completion)
    assert completion.choices[0].finish_reason in {"stop", "length"}


@pytest.mark.parametrize(
    "response_format",
    [
        pytest.param({"type": "json_object"}, id="json_object"),
        pytest.param(
            {
                "type": "json_schema",
                "json_schema": {
                    "name": "fact",
                    "schema": {"type": "object", "properties": {"fact": {"type": "string"}}, "required": ["fact"]},
                },
            },
            id="json_schema",
        ),
    ],
)
def test_json_response_formats_give_json(client: openai.OpenAI, response_format: dict[str, Any]) -> None:
    completion = chat(client, user("Give me a fact as JSON."), response_format=response_format)
    assert isinstance(json.loads(content_of(completion)), dict)


def test_seed_is_part_of_the_request(client: openai.OpenAI) -> None:
    messages = user("Pick a random number.")
    assert content_of(chat(client, messages, seed=1)) == content_of(chat(client, messages, seed=1))


def test_stop_sequence_is_not_in_the_output(client: openai.OpenAI) -> None:
    messages = user("Tell me about the stop parameter.")
    words = content_of(chat(client, messages)).split()
    assert len(words) >= 3
    stop = words[1]
    stopped = content_of(chat(client, messages, stop=[stop]))
    assert stop not in stopped


def test_fallback_model_answers(client: openai.OpenAI) -> None:
    completion = chat(client, user("Are you there?"), model="dummy-fallback")
    assert completion.model == "dummy-fallback"
    assert content_of(completion)
    assert completion.choices[0].finish_reason == "stop"


def test_shorthand_models_answer_without_configuration(client: openai.OpenAI) -> None:
    completion = chat(client, user("Who are you?"), model="dummy::anything")
    assert completion.model == "dummy::anything"
    assert content_of(completion)
    chunks = list(client.chat.completions.create(model="dummy::anything", messages=user("Hi"), stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    with pytest.raises(openai.NotFoundError) as raised:
        chat(client, user("Hi"), model="nowhere::anything")
    assert raised.value.code == "model_not_found"
    assert "dummy::anything" not in {model.id for model in client.models.list()}


def test_slow_model_takes_about_a_second_and_runs_concurrently(client: openai.OpenAI) -> None:
    started = time.monotonic()
    completion = chat(client, user("Take your time."), model="dummy-slow")
    single = time.monotonic() - started
    assert content_of(completion)
    assert single >= 0.8, f"dummy-slow answered in {single:.2f}s"

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda i: chat(client, user(f"request {i}"), model="dummy-slow"), range(4)))
    elapsed = time.monotonic() - started
    assert all(content_of(r) for r in results)
    assert elapsed < 3.0, f"4 concurrent dummy-slow requests took {elapsed:.2f}s: requests are serialised"


def test_raw_response_has_request_id(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="dummy", messages=user("hi"))
    first = raw.headers.get("x-request-id")
    assert first
    assert content_of(raw.parse())
    again = client.chat.completions.with_raw_response.create(model="dummy", messages=user("hi"))
    assert again.headers.get("x-request-id") not in (None, first)
