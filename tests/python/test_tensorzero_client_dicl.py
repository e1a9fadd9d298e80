"""DICL (`experimental_dynamic_in_context_learning`) through the real `tensorzero` client: examples
built from stored inferences through `POST /dicl/build` and `nimbus dicl build`, then what reaches
the upstream model with and without examples, whole and streamed (TensorZero's prompt: the
system instructions; per example a user turn with its input as StoredInput JSON and an assistant
turn with its output; last the request's StoredInput JSON; without examples the request's messages
under the instructions, its own system dropped). `dicl_chat` is in tensorzero_config/."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from tensorzero import TensorZeroGateway

import nimbus_testkit as kit
import tensorzero_kit as tzk
from mock_upstream import RecordedRequest, RecordingUpstream

INSTRUCTIONS = "Answer like the examples do.\n"
UPSTREAM_ANSWER = "Hello from choice 0"


def stored_input(text: str, system: str | None = None) -> dict[str, Any]:
    """An input of one user text as TensorZero stores it."""
    value: dict[str, Any] = {"messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]}
    if system is not None:
        value = {"system": system, **value}
    return value


def turns(sent: RecordedRequest) -> list[tuple[str, str]]:
    """(role, text) of each message the upstream received."""
    out = []
    for message in sent.body["messages"]:
        content = message["content"]
        text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
        out.append((message["role"], text))
    return out


def seed(tz: TensorZeroGateway, text: str, system: str | None = None) -> str:
    """One inference on `base` (the recording upstream answers); its id."""
    response = tz.inference(function_name="dicl_chat", variant_name="base", input=tzk.says(text, system=system))
    return str(response.inference_id)


def build(server: kit.NimbusServer, **body: Any) -> requests.Response:
    return requests.post(f"{server.base_url}/dicl/build", json=body, timeout=60)


def ask_dicl(tz: TensorZeroGateway, upstream: RecordingUpstream, text: str, *, variant: str, stream: bool, system: str | None = None):
    """A DICL inference; the client's answer (chunks when streamed) and what the upstream received."""
    answer = tz.inference(function_name="dicl_chat", variant_name=variant, input=tzk.says(text, system=system), stream=stream)
    if stream:
        answer = list(answer)
    found = upstream.with_text(text)
    return answer, found[-1]


def streamed_text_and_usage(chunks: list[Any]) -> tuple[str, Any]:
    text = "".join(block.text for chunk in chunks for block in chunk.content if block.type == "text")
    usage = next(chunk.usage for chunk in reversed(chunks) if chunk.usage is not None)
    return text, usage


@pytest.mark.parametrize("stream", [False, True])
def test_without_examples_the_request_goes_under_the_instructions_and_its_system_is_dropped(
    tz: TensorZeroGateway, tz_upstream: RecordingUpstream, stream: bool
) -> None:
    marker = tzk.tag()
    answer, sent = ask_dicl(tz, tz_upstream, marker, variant="unbuilt", stream=stream, system="be terse")
    assert turns(sent) == [("system", INSTRUCTIONS), ("user", marker)]
    assert bool(sent.body.get("stream")) is stream
    if stream:
        text, usage = streamed_text_and_usage(answer)
        assert text == UPSTREAM_ANSWER
        assert answer[0].variant_name == "unbuilt"
    else:
        assert tzk.text_of(answer) == UPSTREAM_ANSWER
        usage = answer.usage
    # The mock counts 4 prompt tokens; the dummy embedding's tokens are added.
    assert usage.input_tokens > 4


@pytest.mark.parametrize("stream", [False, True])
def test_examples_built_through_the_route_come_before_the_request(
    tz: TensorZeroGateway, tz_upstream: RecordingUpstream, tz_server: kit.NimbusServer, stream: bool
) -> None:
    run = tzk.tag()
    questions = [f"{run} question {i}" for i in range(3)]
    ids = [seed(tz, q, system="be terse") for q in questions]
    built = build(tz_server, function_name="dicl_chat", variant_name="dicl", replace=True)
    assert built.status_code == 200, built.text
    report = built.json()
    assert report["embedding_model"] == "dummy::dicl-embed"
    assert report["examples"] >= 3 and report["added"] == report["examples"]

    answer, sent = ask_dicl(tz, tz_upstream, questions[1], variant="dicl", stream=stream, system="be terse")
    sent_turns = turns(sent)
    # The example with the very same input is the nearest, so it comes first; other stored
    # inferences of the function (other tests') may follow it when they are within max_distance.
    roles = [role for role, _ in sent_turns]
    assert roles[0] == "system" and roles[-1] == "user", sent_turns
    assert roles[1:-1] == ["user", "assistant"] * ((len(roles) - 2) // 2) and len(roles) >= 4, sent_turns
    assert sent_turns[0] == ("system", INSTRUCTIONS)
    assert json.loads(sent_turns[1][1]) == stored_input(questions[1], system="be terse")
    assert sent_turns[2] == ("assistant", UPSTREAM_ANSWER)
    assert json.loads(sent_turns[-1][1]) == stored_input(questions[1], system="be terse")
    assert bool(sent.body.get("stream")) is stream
    inference_id = answer[0].inference_id if stream else answer.inference_id
    record = requests.get(f"{tz_server.base_url}/inferences/{inference_id}", timeout=10)
    calls = record.json()["model_calls"]
    models = [call["model_name"] for call in calls]
    # Whole: the embedding is the first model call; streamed, it is stored after the streamed one.
    assert models == (["mock", "dummy::dicl-embed"] if stream else ["dummy::dicl-embed", "mock"])
    assert ids  # the seeded inferences are what was built from


def test_a_demonstration_built_by_the_command_is_the_examples_answer(
    tz: TensorZeroGateway, tz_upstream: RecordingUpstream, tz_server: kit.NimbusServer
) -> None:
    question = f"{tzk.tag()} demonstrated"
    inference_id = seed(tz, question)
    demonstration = f"The demonstrated answer to {question}"
    tz.feedback(metric_name="demonstration", value=demonstration, inference_id=inference_id)
    cli = kit.NimbusCli(kit.clean_env())
    result = cli.run(
        "dicl", "build", "--function", "dicl_chat", "--variant", "dicl",
        "--output-source", "demonstration", "--replace", "--base-url", tz_server.base_url,
    )  # fmt: skip
    report = json.loads(result.stdout)
    assert report["output_source"] == "demonstration"
    assert report["examples"] >= 1

    _, sent = ask_dicl(tz, tz_upstream, question, variant="dicl", stream=False)
    sent_turns = turns(sent)
    assert sent_turns[2] == ("assistant", demonstration), sent_turns
    assert len(sent_turns) == 4

    # Built again without --append or --replace: refused, the message says why.
    again = cli.run("dicl", "build", "--function", "dicl_chat", "--variant", "dicl", "--base-url", tz_server.base_url, check=False)
    assert again.returncode != 0
    assert "append" in again.stderr and "409" in again.stderr, again.stderr


def test_a_build_names_what_it_refuses(tz_server: kit.NimbusServer) -> None:
    not_dicl = build(tz_server, function_name="dicl_chat", variant_name="base")
    assert not_dicl.status_code == 400
    assert "experimental_dynamic_in_context_learning" in not_dicl.json()["error"]
    assert build(tz_server, function_name="no_such_function", variant_name="dicl").status_code == 404
    unknown_field = build(tz_server, function_name="dicl_chat", variant_name="dicl", k=3)
    assert unknown_field.status_code == 400
    both = build(tz_server, function_name="dicl_chat", variant_name="dicl", append=True, replace=True)
    assert both.status_code == 400


def test_inference_level_extra_body_is_refused_for_a_dicl_variant(tz: TensorZeroGateway) -> None:
    message = tzk.expect_error(
        400,
        tz.inference,
        function_name="dicl_chat",
        variant_name="unbuilt",
        input=tzk.says("hi"),
        extra_body=[{"pointer": "/x", "value": 1}],
    )
    assert "extra_body" in message
