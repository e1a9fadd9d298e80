"""`n` choices through the OpenAI SDK: the dummy answers `n` distinct choices itself; an
OpenAI-compatible upstream receives `n` and every choice it answers reaches the client, streamed
or not; a batch line with `n` gets every choice too."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Callable

import openai
import pytest

import nimbus_testkit as kit
from mock_upstream import RecordingUpstream

user = kit.user


def accumulate_choices(stream: Iterable[Any]) -> tuple[dict[int, str], dict[int, str], Any]:
    """A chat stream's text and finish reason per choice index, and the usage of its usage chunk."""
    texts: dict[int, str] = {}
    finishes: dict[int, str] = {}
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    return texts, finishes, usage


def test_n_choices_are_numbered_and_distinct(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="dummy", messages=user("Three answers, please."), n=3)
    assert [choice.index for choice in completion.choices] == [0, 1, 2]
    contents = [choice.message.content for choice in completion.choices]
    assert len(set(contents)) == 3, contents
    assert all(choice.finish_reason == "stop" for choice in completion.choices)
    single = client.chat.completions.create(model="dummy", messages=user("Three answers, please."))
    assert contents[0] == single.choices[0].message.content
    words = sum(len(content.split()) for content in contents)
    assert completion.usage.completion_tokens == words
    assert completion.usage.prompt_tokens == single.usage.prompt_tokens


def test_streamed_choices_accumulate_by_index(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model="dummy", messages=user("Two streamed answers."), n=2)
    with client.chat.completions.create(
        model="dummy", messages=user("Two streamed answers."), n=2, stream=True, stream_options={"include_usage": True}
    ) as stream:
        texts, finishes, usage = accumulate_choices(stream)
    assert texts == {c.index: c.message.content for c in whole.choices}
    assert finishes == {0: "stop", 1: "stop"}
    assert usage is not None and usage.total_tokens == whole.usage.total_tokens


def test_forced_tool_calls_come_in_every_choice(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="dummy", messages=user("Weather?"), n=2, tools=[kit.WEATHER_TOOL], tool_choice="required"
    )
    calls = [choice.message.tool_calls[0] for choice in completion.choices]
    assert len({call.id for call in calls}) == 2
    assert all(call.function.name == "get_weather" for call in calls)


def test_a_batch_line_with_n_gets_every_choice(client: openai.OpenAI) -> None:
    lines = [kit.chat_line("two", "Two answers in a batch.", n=2), kit.chat_line("one", "One answer.")]
    batch_input = kit.upload_batch_input(client, lines)
    batch = client.batches.create(input_file_id=batch_input.id, endpoint="/v1/chat/completions", completion_window="24h")
    batch = kit.wait_for_batch(client, batch.id)
    assert batch.status == "completed", batch
    output, errors = kit.batch_results(client, batch)
    assert errors == []
    bodies = {line["custom_id"]: line["response"]["body"] for line in output}
    assert [choice["index"] for choice in bodies["two"]["choices"]] == [0, 1]
    assert len(bodies["one"]["choices"]) == 1


# --------------------------------------------------------------------------------------------
# An OpenAI-compatible upstream
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def upstream() -> Iterator[RecordingUpstream]:
    mock = RecordingUpstream()
    try:
        yield mock
    finally:
        mock.stop()


@pytest.fixture(scope="module")
def gateway(upstream: RecordingUpstream, server_factory: Callable[..., kit.NimbusServer], tmp_path_factory) -> Iterator[openai.OpenAI]:
    config: Path = tmp_path_factory.mktemp("upstream-config") / "nimbus.toml"
    config.write_text(
        "[models.upstream]\n"
        'routing = ["mock"]\n\n'
        "[models.upstream.providers.mock]\n"
        'type = "openai"\n'
        'model_name = "mock-model"\n'
        f'api_base = "{upstream.api_base}"\n'
        'api_key_location = "none"\n'
    )
    server = server_factory("nimbus-upstream", config=config)
    sdk = kit.make_client(server.api_base)
    try:
        yield sdk
    finally:
        sdk.close()


def test_the_upstream_receives_n_and_every_choice_comes_back(gateway: openai.OpenAI, upstream: RecordingUpstream) -> None:
    completion = gateway.chat.completions.create(model="upstream", messages=user("Hi"), n=3)
    assert upstream.bodies[-1]["n"] == 3
    assert upstream.bodies[-1]["model"] == "mock-model"
    assert [c.index for c in completion.choices] == [0, 1, 2]
    assert [c.message.content for c in completion.choices] == [f"Hello from choice {i}" for i in range(3)]
    assert completion.usage.completion_tokens == 12


def test_an_upstream_stream_keeps_each_choice_index(gateway: openai.OpenAI, upstream: RecordingUpstream) -> None:
    with gateway.chat.completions.create(
        model="upstream", messages=user("Hi"), n=2, stream=True, stream_options={"include_usage": True}
    ) as stream:
        texts, _, usage = accumulate_choices(stream)
    assert upstream.bodies[-1]["n"] == 2 and upstream.bodies[-1]["stream"] is True
    assert texts == {0: "Hello from choice 0", 1: "Hello from choice 1"}
    assert usage is not None and usage.completion_tokens == 8
