"""TensorZero's OpenAI-compatible surface: the OpenAI SDK at `{root}/openai/v1` with
`tensorzero::function_name::F` / `tensorzero::model_name::M` models runs the function layer
(templates, variants, tools, json functions, episodes, records)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import openai
import pytest
import requests

import nimbus_testkit as kit


@pytest.fixture(scope="module")
def tz_openai(nimbus_server: kit.NimbusServer) -> Iterator[openai.OpenAI]:
    with kit.make_client(f"{nimbus_server.base_url}/openai/v1") as client:
        yield client


def arguments(values: dict) -> list[dict]:
    return [{"type": "text", "tensorzero::arguments": values}]


def draft_email(client: openai.OpenAI, **kwargs):
    return client.chat.completions.create(
        model="tensorzero::function_name::draft_email",
        messages=[
            {"role": "system", "content": arguments({"sender_name": "Ann"})},
            {"role": "user", "content": arguments({"recipient": "Bob", "topic": "the budget"})},
        ],
        **kwargs,
    )


def test_a_function_answers_with_its_variant_in_the_model_name(tz_openai: openai.OpenAI) -> None:
    reply = draft_email(tz_openai)
    assert reply.model.startswith("tensorzero::function_name::draft_email::variant_name::")
    assert reply.model.rsplit("::", 1)[1] in {"formal", "casual"}
    # The user template rendered the arguments before the model saw them.
    assert "Bob" in reply.choices[0].message.content and "the budget" in reply.choices[0].message.content
    assert uuid.UUID(reply.id).version == 7
    episode = reply.model_extra["episode_id"]
    assert uuid.UUID(episode).version == 7
    assert reply.usage.prompt_tokens > 0


def test_an_episode_keeps_its_variant(tz_openai: openai.OpenAI) -> None:
    first = draft_email(tz_openai)
    episode = first.model_extra["episode_id"]
    for _ in range(4):
        again = draft_email(tz_openai, extra_body={"tensorzero::episode_id": episode})
        assert again.model == first.model
        assert again.model_extra["episode_id"] == episode


def test_variant_pinning_tags_and_the_stored_record(nimbus_server: kit.NimbusServer, tz_openai: openai.OpenAI) -> None:
    reply = draft_email(
        tz_openai, extra_body={"tensorzero::variant_name": "casual", "tensorzero::tags": {"team": "ml"}}
    )
    assert reply.model.endswith("::variant_name::casual")
    url = f"{nimbus_server.base_url}/inferences/{reply.id}"
    kit.wait_until(lambda: requests.get(url, timeout=5).ok, timeout=10, what="the inference record")
    record = requests.get(url, timeout=5).json()
    assert record["variant_name"] == "casual"
    assert record["tags"] == {"team": "ml"}
    assert record["function_name"] == "draft_email"


def test_tools_come_back_as_openai_tool_calls(tz_openai: openai.OpenAI) -> None:
    reply = tz_openai.chat.completions.create(
        model="tensorzero::function_name::weather_assistant",
        messages=[{"role": "user", "content": "What is the weather in Oslo?"}],
        tool_choice="required",
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert "city" in json.loads(call.function.arguments)


def test_a_json_function_answers_json_text(tz_openai: openai.OpenAI) -> None:
    reply = tz_openai.chat.completions.create(
        model="tensorzero::function_name::extract_contact",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "tensorzero::template", "name": "document", "arguments": {"document": "Ann, ann@x.io"}}
                ],
            }
        ],
    )
    parsed = json.loads(reply.choices[0].message.content)
    assert set(parsed) >= {"name", "email"}


def test_model_name_streaming_with_usage(tz_openai: openai.OpenAI) -> None:
    stream = tz_openai.chat.completions.create(
        model="tensorzero::model_name::dummy",
        messages=[{"role": "user", "content": "stream me"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "stream me" in text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert all(c.model == "tensorzero::model_name::dummy" for c in chunks)
    assert len({c.id for c in chunks}) == 1


def test_embeddings_through_the_tensorzero_path(tz_openai: openai.OpenAI) -> None:
    reply = tz_openai.embeddings.create(model="tensorzero::embedding_model_name::dummy-embedding", input=["a", "b"])
    assert len(reply.data) == 2 and len(reply.data[0].embedding) == 16


def test_errors_use_the_openai_envelope_with_tensorzero_statuses(tz_openai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as bad_model:
        tz_openai.chat.completions.create(model="dummy", messages=[{"role": "user", "content": "x"}])
    assert "tensorzero::function_name::" in str(bad_model.value)
    with pytest.raises(openai.NotFoundError):
        tz_openai.chat.completions.create(
            model="tensorzero::function_name::no_such_function", messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(openai.BadRequestError) as schema:
        tz_openai.chat.completions.create(
            model="tensorzero::function_name::draft_email",
            messages=[{"role": "system", "content": arguments({"wrong": 1})}],
        )
    assert "input.system" in str(schema.value)
    with pytest.raises(openai.InternalServerError) as failed:
        tz_openai.chat.completions.create(
            model="tensorzero::model_name::dummy-error", messages=[{"role": "user", "content": "x"}]
        )
    assert failed.value.status_code == 502
