"""The inference-time optimization variants through the real `tensorzero` client, on the recording
upstream: best-of-n (`experimental_best_of_n_sampling`), mixture-of-n and chain of thought, whole and
streamed, with failing judges and fusers, lone survivors and the stored model calls.

The mock answers the judge (`judge-model`) with the index of a `[judge-picks:N]` marker and the fuser
(`fuser-model`) with "fused answer"; `[echo-model]` makes each candidate say which model it ran on
(tests/python/mock_upstream.py, tensorzero_config/test_functions.toml)."""

from __future__ import annotations

import json
from typing import Any

import requests
from tensorzero import TensorZeroGateway

import nimbus_testkit as kit
import tensorzero_kit as tzk
from mock_upstream import RecordingUpstream
from test_tensorzero_client_records import record

MODEL_A = "answer from mock-model"
MODEL_B = "answer from mock-b-model"


def ask(marker: str, *extra: str) -> dict[str, Any]:
    return tzk.says(" ".join(["[echo-model]", marker, *extra]), system="Answer briefly.")


def by_model(upstream: RecordingUpstream, marker: str) -> dict[str, list[dict[str, Any]]]:
    """The upstream requests mentioning `marker`, by the model they asked for."""
    found: dict[str, list[dict[str, Any]]] = {}
    for request in upstream.with_text(marker):
        found.setdefault(request.body["model"], []).append(request.body)
    return found


def streamed_text(chunks: list[Any]) -> str:
    return "".join(block.text for chunk in chunks for block in chunk.content if block.type == "text")


# --------------------------------------------------------------------------------------------
# Best-of-n
# --------------------------------------------------------------------------------------------


def test_best_of_n_returns_the_candidate_the_judge_picks(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    marker = tzk.tag()
    response = tz.inference(
        function_name="ensemble",
        variant_name="best",
        input=ask(marker, "[judge-picks:1]"),
        params={"chat_completion": {"temperature": 0.9, "max_tokens": 7}},
        include_original_response=True,
    )
    assert response.variant_name == "best"
    assert tzk.text_of(response) == MODEL_B
    sent = by_model(tz_upstream, marker)
    assert sorted((model, len(bodies)) for model, bodies in sent.items()) == [
        ("judge-model", 1), ("mock-b-model", 1), ("mock-model", 2)
    ]  # fmt: skip
    # Candidates keep their own parameters: the request's are not forwarded.
    assert [b.get("temperature") for b in sent["mock-model"]] == [0.3, 0.3]
    assert "temperature" not in sent["mock-b-model"][0]
    assert all("max_tokens" not in b and "max_completion_tokens" not in b for b in sent["mock-model"])
    # Four calls of 4 + 4 tokens each.
    assert (response.usage.input_tokens, response.usage.output_tokens) == (16, 16)
    assert json.loads(json.loads(response.original_response)["choices"][0]["message"]["content"])["answer_choice"] == 1


def test_the_judge_is_asked_with_tensorzeros_protocol(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    marker = tzk.tag()
    tz.inference(function_name="ensemble", variant_name="best", input=ask(marker, "[judge-picks:2]"))
    [judge] = by_model(tz_upstream, marker)["judge-model"]
    schema = judge["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["thinking", "answer_choice"] and schema["additionalProperties"] is False
    assert judge["temperature"] == 0.1
    system, *conversation, candidates = judge["messages"]
    assert system["role"] == "system" and "Answer briefly." in system["content"] and "answer_choice" in system["content"]
    assert "from 0 to 2" in system["content"]
    assert conversation[0]["content"] == ask(marker, "[judge-picks:2]")["messages"][0]["content"]
    text = candidates["content"] if isinstance(candidates["content"], str) else candidates["content"][0]["text"]
    assert text.count("------") == 3
    assert f'0: [{{"type":"text","text":"{MODEL_A}"}}]' in text


def test_the_judges_index_maps_to_its_candidate(tz: TensorZeroGateway) -> None:
    for index, expected in ((0, MODEL_A), (1, MODEL_B), (2, MODEL_A)):
        response = tz.inference(
            function_name="ensemble", variant_name="best", input=ask(tzk.tag(), f"[judge-picks:{index}]")
        )
        assert tzk.text_of(response) == expected, index


def test_a_failing_or_unusable_judge_means_a_random_candidate(tz: TensorZeroGateway) -> None:
    for trouble in ("[judge-fails]", "[judge-garbage]", "[judge-picks:7]"):
        seen = set()
        for _ in range(40):
            response = tz.inference(
                function_name="ensemble",
                variant_name="best",
                input=ask(tzk.tag(), trouble),
                include_original_response=True,
            )
            seen.add(tzk.text_of(response))
            if trouble == "[judge-fails]":
                assert response.original_response is None
        assert seen == {MODEL_A, MODEL_B}, (trouble, seen)


def test_a_lone_survivor_is_returned_without_asking_the_judge(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    marker = tzk.tag()
    response = tz.inference(function_name="ensemble", variant_name="best_lone", input=ask(marker))
    assert tzk.text_of(response) == MODEL_A
    assert list(by_model(tz_upstream, marker)) == ["mock-model"]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (4, 4)


def test_best_of_n_streams_one_chunk_with_the_summed_usage(tz: TensorZeroGateway) -> None:
    chunks = list(
        tz.inference(function_name="ensemble", variant_name="best", input=ask(tzk.tag(), "[judge-picks:1]"), stream=True)
    )
    assert len(chunks) == 1
    [chunk] = chunks
    assert streamed_text(chunks) == MODEL_B
    assert chunk.content[0].id == "0"
    assert chunk.variant_name == "best"
    assert (chunk.usage.input_tokens, chunk.usage.output_tokens) == (16, 16)
    assert chunk.finish_reason is not None


def test_best_of_n_stores_the_chosen_candidate_then_the_others_then_the_judge(
    tz: TensorZeroGateway, tz_server: kit.NimbusServer
) -> None:
    response = tz.inference(function_name="ensemble", variant_name="best", input=ask(tzk.tag(), "[judge-picks:1]"))
    stored = record(tz_server, response.inference_id)
    assert stored["variant_name"] == "best"
    assert [c["model_name"] for c in stored["model_calls"]] == ["mock-b", "mock", "mock", "mock-judge"]
    assert stored["usage"] == {"input_tokens": 16, "output_tokens": 16}
    assert stored["output"] == [{"type": "text", "text": MODEL_B}]


# --------------------------------------------------------------------------------------------
# Mixture-of-n
# --------------------------------------------------------------------------------------------


def test_mixture_of_n_answers_with_the_fuser(
    tz: TensorZeroGateway, tz_upstream: RecordingUpstream, tz_server: kit.NimbusServer
) -> None:
    marker = tzk.tag()
    response = tz.inference(
        function_name="ensemble",
        variant_name="mixed",
        input=ask(marker),
        params={"chat_completion": {"temperature": 0.9}},
        include_original_response=True,
    )
    assert tzk.text_of(response) == "fused answer"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 12)
    assert json.loads(response.original_response)["model"] == "fuser-model"
    sent = by_model(tz_upstream, marker)
    [fuser] = sent["fuser-model"]
    assert "temperature" not in fuser, "request params do not reach the fuser"
    assert sent["mock-model"][0]["temperature"] == 0.3
    system, *_, candidates = fuser["messages"]
    assert "Answer briefly." in system["content"]
    text = candidates["content"] if isinstance(candidates["content"], str) else candidates["content"][0]["text"]
    assert MODEL_A in text and MODEL_B in text and text.count("------") == 2
    stored = record(tz_server, response.inference_id)
    assert [c["model_name"] for c in stored["model_calls"]] == ["mock-fuser", "mock", "mock-b"]


def test_mixture_of_n_streams_the_fuser(tz: TensorZeroGateway) -> None:
    chunks = list(tz.inference(function_name="ensemble", variant_name="mixed", input=ask(tzk.tag()), stream=True))
    assert len(chunks) > 1, "the fuser streams for real"
    assert streamed_text(chunks) == "fused answer"
    usage = [c.usage for c in chunks if c.usage is not None]
    assert [(u.input_tokens, u.output_tokens) for u in usage] == [(12, 12)]


def test_a_failing_fuser_means_a_random_candidate(tz: TensorZeroGateway) -> None:
    seen = set()
    for _ in range(12):
        response = tz.inference(
            function_name="ensemble",
            variant_name="mixed",
            input=ask(tzk.tag(), "[fuser-fails]"),
            include_original_response=True,
        )
        seen.add(tzk.text_of(response))
        assert response.original_response is None
    assert seen == {MODEL_A, MODEL_B}
    chunks = list(
        tz.inference(function_name="ensemble", variant_name="mixed", input=ask(tzk.tag(), "[fuser-fails]"), stream=True)
    )
    assert len(chunks) == 1 and streamed_text(chunks) in {MODEL_A, MODEL_B}


def test_a_lone_mixture_candidate_is_returned_without_the_fuser(
    tz: TensorZeroGateway, tz_upstream: RecordingUpstream
) -> None:
    marker = tzk.tag()
    response = tz.inference(function_name="ensemble", variant_name="mixed_lone", input=ask(marker))
    assert tzk.text_of(response) == MODEL_B
    assert list(by_model(tz_upstream, marker)) == ["mock-b-model"]


# --------------------------------------------------------------------------------------------
# Chain of thought, batches
# --------------------------------------------------------------------------------------------


def test_chain_of_thought_returns_the_response_and_stores_the_thinking(
    tz: TensorZeroGateway, tz_upstream: RecordingUpstream, tz_server: kit.NimbusServer
) -> None:
    marker = tzk.tag()
    response = tz.inference(function_name="json_cot", input=tzk.says(f"[reply-cot] {marker}"))
    assert response.output.parsed == {"answer": "yes"}
    assert json.loads(response.output.raw) == {"answer": "yes"}
    sent = tz_upstream.one_with_text(marker).body
    schema = sent["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["thinking", "response"]
    assert schema["properties"]["response"]["required"] == ["answer"]
    stored = record(tz_server, response.inference_id)
    assert stored["output"]["parsed"] == {"answer": "yes"}
    assert stored["output"]["auxiliary_content"] == [{"type": "thought", "text": "step by step"}]
    assert stored["output_schema"]["required"] == ["answer"], "the function's own schema is stored"


def test_chain_of_thought_does_not_stream(tz: TensorZeroGateway) -> None:
    message = tzk.expect_error(
        502, tz.inference, function_name="json_cot", input=tzk.says("[reply-cot] streamed"), stream=True
    )
    assert "do not support streaming" in message


def test_ensembles_refuse_batch_inference(tz_server: kit.NimbusServer) -> None:
    body = {"function_name": "ensemble", "variant_name": "best", "inputs": [tzk.says("hi")]}
    response = requests.post(f"{tz_server.base_url}/batch_inference", json=body, timeout=10)
    assert response.status_code == 400, response.text
    assert "batch inference" in response.text
