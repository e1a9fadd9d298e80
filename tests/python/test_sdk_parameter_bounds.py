"""OpenAI's bounds on chat completion parameters, through the OpenAI SDK: a value past a bound is a
400 naming the parameter with OpenAI's code; values at the bounds are accepted."""

from __future__ import annotations

from typing import Any

import openai
import pytest

import nimbus_testkit as kit

user = kit.user

REJECTED = [
    pytest.param({"stop": ["a", "b", "c", "d", "e"]}, "stop", "array_above_max_length", id="stop-5"),
    pytest.param({"logit_bias": {str(i): 1 for i in range(301)}}, "logit_bias", "object_above_max_properties", id="logit_bias-301"),
    pytest.param({"logit_bias": {"50256": 101}}, "logit_bias", "decimal_above_max_value", id="logit_bias-101"),
    pytest.param({"logit_bias": {"50256": -101}}, "logit_bias", "decimal_below_min_value", id="logit_bias--101"),
    pytest.param({"logit_bias": {"hello": 1}}, "logit_bias", "invalid_value", id="logit_bias-key"),
    pytest.param({"logit_bias": {"1": "up"}}, "logit_bias.1", "invalid_type", id="logit_bias-value-type"),
    pytest.param({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata", "object_above_max_properties", id="metadata-17"),
    pytest.param({"metadata": {"k" * 65: "v"}}, "metadata", "string_above_max_length", id="metadata-key-65"),
    pytest.param({"metadata": {"k": "v" * 513}}, "metadata", "string_above_max_length", id="metadata-value-513"),
    pytest.param({"metadata": {"k": 5}}, "metadata.k", "invalid_type", id="metadata-value-type"),
    pytest.param({"max_tokens": 0}, "max_tokens", "integer_below_min_value", id="max_tokens-0"),
    pytest.param({"max_tokens": -1}, "max_tokens", "integer_below_min_value", id="max_tokens--1"),
    pytest.param({"max_completion_tokens": -5}, "max_completion_tokens", "integer_below_min_value", id="max_completion_tokens--5"),
    pytest.param({"max_tokens": 2.5}, "max_tokens", "invalid_type", id="max_tokens-decimal"),
    pytest.param({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "integer_above_max_value", id="top_logprobs-21"),
    pytest.param({"logprobs": True, "top_logprobs": -1}, "top_logprobs", "integer_below_min_value", id="top_logprobs--1"),
    pytest.param({"top_logprobs": 3}, "top_logprobs", "invalid_value", id="top_logprobs-without-logprobs"),
    pytest.param({"seed": 1.5}, "seed", "invalid_type", id="seed-decimal"),
    pytest.param({"seed": "42"}, "seed", "invalid_type", id="seed-string"),
    pytest.param({"n": 0}, "n", "integer_below_min_value", id="n-0"),
    pytest.param({"n": 129}, "n", "integer_above_max_value", id="n-129"),
    pytest.param({"n": "2"}, "n", "invalid_type", id="n-string"),
    pytest.param({"presence_penalty": 2.5}, "presence_penalty", "decimal_above_max_value", id="presence_penalty-2.5"),
    pytest.param({"frequency_penalty": -3}, "frequency_penalty", "decimal_below_min_value", id="frequency_penalty--3"),
    pytest.param({"temperature": 2.5}, "temperature", "decimal_above_max_value", id="temperature-2.5"),
]


@pytest.mark.parametrize(("kwargs", "param", "code"), REJECTED)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_values_past_a_bound_are_a_400_naming_the_parameter(
    client: openai.OpenAI, kwargs: dict[str, Any], param: str, code: str, stream: bool
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="dummy", messages=user("Bounds?"), stream=stream, **kwargs)
    assert raised.value.status_code == 400
    error = kit.error_envelope(raised.value.response)
    assert (error["param"], error["code"]) == (param, code), error
    assert error["type"] == "invalid_request_error"
    assert len(error["message"]) < 300, "the message quotes no client value whole"


def test_client_keys_are_not_echoed_whole(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="dummy", messages=user("x"), metadata={"k" * 100_000: "v"})
    assert len(raised.value.response.text) < 1000


ACCEPTED = [
    pytest.param({"stop": ["a", "b", "c", "d"]}, id="stop-4"),
    pytest.param({"logit_bias": {str(i): -100 for i in range(300)}}, id="logit_bias-300"),
    pytest.param({"logit_bias": {"50256": 100}}, id="logit_bias-100"),
    pytest.param({"metadata": {f"{i:0>64}": "v" * 512 for i in range(16)}}, id="metadata-16-64-512"),
    pytest.param({"max_tokens": 1}, id="max_tokens-1"),
    pytest.param({"max_completion_tokens": 1}, id="max_completion_tokens-1"),
    pytest.param({"logprobs": True, "top_logprobs": 20}, id="top_logprobs-20"),
    pytest.param({"logprobs": True, "top_logprobs": 0}, id="top_logprobs-0"),
    pytest.param({"seed": -7}, id="seed-negative"),
    pytest.param({"n": 128}, id="n-128"),
    pytest.param({"presence_penalty": -2, "frequency_penalty": 2}, id="penalties-at-bounds"),
]


@pytest.mark.parametrize("kwargs", ACCEPTED)
def test_values_at_the_bounds_are_accepted(client: openai.OpenAI, kwargs: dict[str, Any]) -> None:
    completion = client.chat.completions.create(model="dummy", messages=user("Bounds?"), **kwargs)
    assert len(completion.choices) == kwargs.get("n", 1)
    assert completion.choices[0].message.content is not None
