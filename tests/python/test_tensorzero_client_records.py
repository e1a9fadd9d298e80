"""What `/inference` keeps, through the real `tensorzero` client: the model cache
(`cache_options`), feedback (`feedback()`), and the stored records (`GET /inferences/{id}`,
`GET /episodes/{id}/inferences`, a Nimbus extension read with plain HTTP)."""

from __future__ import annotations

import json
import time
from typing import Any

import requests
from tensorzero import TensorZeroGateway

import nimbus_testkit as kit
import tensorzero_kit as tzk
from mock_upstream import RecordingUpstream


def record(server: kit.NimbusServer, inference_id: Any, *, timeout: float = 5.0) -> dict[str, Any]:
    """The stored record of an inference (records are written just after the answer)."""
    deadline = time.monotonic() + timeout
    while True:
        response = requests.get(f"{server.base_url}/inferences/{inference_id}", timeout=10)
        if response.status_code == 200:
            return response.json()
        assert response.status_code == 404, response.text
        if time.monotonic() >= deadline:
            raise AssertionError(f"no record of {inference_id} within {timeout:.0f}s")
        time.sleep(0.05)


# --------------------------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------------------------


def test_a_second_identical_call_is_served_from_the_cache(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    request = {"function_name": "relay", "input": tzk.says(tzk.tag()), "cache_options": {"enabled": "on"}}
    first = tz.inference(**request)
    assert first.usage.input_tokens > 0
    second = tz.inference(**request)
    assert tzk.text_of(second) == tzk.text_of(first)
    assert (second.usage.input_tokens, second.usage.output_tokens) == (0, 0)
    assert len(tz_upstream.with_text(request["input"]["messages"][0]["content"])) == 1


def test_cache_off_and_write_only_never_read(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    marker = tzk.tag()
    for mode in ("write_only", "off", "write_only"):
        response = tz.inference(function_name="relay", input=tzk.says(marker), cache_options={"enabled": mode})
        assert response.usage.input_tokens > 0
    assert len(tz_upstream.with_text(marker)) == 3


def test_a_dryrun_never_writes_the_cache(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    marker = tzk.tag()
    tz.inference(function_name="relay", input=tzk.says(marker), cache_options={"enabled": "on"}, dryrun=True)
    again = tz.inference(function_name="relay", input=tzk.says(marker), cache_options={"enabled": "on"})
    assert again.usage.input_tokens > 0
    assert len(tz_upstream.with_text(marker)) == 2


def test_streamed_and_whole_answers_are_cached_apart(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    marker = tzk.tag()
    request = {"function_name": "relay", "input": tzk.says(marker), "cache_options": {"enabled": "on"}}
    tz.inference(**request)
    chunks = list(tz.inference(**request, stream=True))
    again = list(tz.inference(**request, stream=True))
    assert "".join(b.text for c in again for b in c.content) == "".join(b.text for c in chunks for b in c.content)
    usages = [c.usage for c in again if c.usage is not None]
    assert [(u.input_tokens, u.output_tokens) for u in usages] == [(0, 0)]
    assert len(tz_upstream.with_text(marker)) == 2


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


def test_an_inference_is_stored_with_its_input_output_and_model_call(
    tz: TensorZeroGateway, tz_server: kit.NimbusServer
) -> None:
    response = tz.inference(
        function_name="draft_email", input=tzk.email_input(), variant_name="formal", tags={"user_id": "42"}
    )
    stored = record(tz_server, response.inference_id)
    assert stored["inference_id"] == str(response.inference_id)
    assert stored["episode_id"] == str(response.episode_id)
    assert (stored["function_name"], stored["variant_name"], stored["function_type"]) == ("draft_email", "formal", "chat")
    assert stored["tags"] == {"user_id": "42"}
    assert stored["input"]["system"] == tzk.EMAIL_SYSTEM
    assert stored["output"] == [{"type": "text", "text": tzk.text_of(response)}]
    assert stored["usage"] == {"input_tokens": response.usage.input_tokens, "output_tokens": response.usage.output_tokens}
    [call] = stored["model_calls"]
    assert (call["model_name"], call["provider_name"]) == ("dummy", "dummy")
    assert "Write an email to Bob about lunch." in json.loads(call["raw_request"])["messages"][1]["content"]


def test_a_model_call_keeps_what_the_provider_was_sent_and_answered(
    tz: TensorZeroGateway, tz_server: kit.NimbusServer, tz_upstream: RecordingUpstream
) -> None:
    marker = tzk.tag()
    response = tz.inference(function_name="relay", input=tzk.says(marker), extra_body=[{"pointer": "/x", "value": 1}])
    [call] = record(tz_server, response.inference_id)["model_calls"]
    assert (call["model_name"], call["provider_name"], call["cached"]) == ("mock", "mock", False)
    assert json.loads(call["raw_request"]) == tz_upstream.one_with_text(marker).body
    assert json.loads(call["raw_response"])["choices"][0]["message"]["content"] == "Hello from choice 0"
    assert call["usage"] == {"input_tokens": 4, "output_tokens": 4}


def test_a_dryrun_is_not_stored(tz: TensorZeroGateway, tz_server: kit.NimbusServer) -> None:
    dry = tz.inference(function_name="plain_chat", input=tzk.says("dry"), dryrun=True)
    wet = tz.inference(function_name="plain_chat", input=tzk.says("wet"))
    record(tz_server, wet.inference_id)
    response = requests.get(f"{tz_server.base_url}/inferences/{dry.inference_id}", timeout=10)
    assert response.status_code == 404 and set(response.json()) == {"error"}


def test_an_episode_lists_its_inferences_oldest_first(tz: TensorZeroGateway, tz_server: kit.NimbusServer) -> None:
    first = tz.inference(function_name="draft_email", input=tzk.email_input())
    second = tz.inference(function_name="weather_assistant", input=tzk.says("Weather?"), episode_id=first.episode_id)
    record(tz_server, second.inference_id)
    response = requests.get(f"{tz_server.base_url}/episodes/{first.episode_id}/inferences", timeout=10)
    assert response.status_code == 200, response.text
    page = response.json()
    assert page["object"] == "list" and page["has_more"] is False
    assert [r["inference_id"] for r in page["data"]] == [str(first.inference_id), str(second.inference_id)]
    assert [r["function_name"] for r in page["data"]] == ["draft_email", "weather_assistant"]


# --------------------------------------------------------------------------------------------
# Feedback
# --------------------------------------------------------------------------------------------


def test_feedback_on_an_inference_and_an_episode(tz: TensorZeroGateway) -> None:
    response = tz.inference(function_name="draft_email", input=tzk.email_input())
    quality = tz.feedback(metric_name="answer_quality", value=0.8, inference_id=response.inference_id)
    assert quality.feedback_id.version == 7
    sent = tz.feedback(metric_name="email_sent", value=True, episode_id=response.episode_id)
    comment = tz.feedback(metric_name="comment", value="Too long.", inference_id=response.inference_id)
    demonstration = tz.feedback(metric_name="demonstration", value="Dear Bob, lunch?", inference_id=response.inference_id)
    ids = {quality.feedback_id, sent.feedback_id, comment.feedback_id, demonstration.feedback_id}
    assert len(ids) == 4


def test_feedback_that_does_not_fit_its_metric_is_a_400(tz: TensorZeroGateway) -> None:
    response = tz.inference(function_name="plain_chat", input=tzk.says("feedback"))
    message = tzk.expect_error(400, tz.feedback, metric_name="email_sent", value=0.5, episode_id=response.episode_id)
    assert "email_sent" in message
    # An episode-level metric given an inference.
    message = tzk.expect_error(400, tz.feedback, metric_name="email_sent", value=True, inference_id=response.inference_id)
    assert "episode" in message


def test_feedback_on_an_unknown_target_or_metric_is_refused(tz: TensorZeroGateway) -> None:
    unknown = tzk.uuid7_at(int(time.time() * 1000) - 1000)
    tzk.expect_error(404, tz.feedback, metric_name="answer_quality", value=1.0, inference_id=unknown)
    response = tz.inference(function_name="plain_chat", input=tzk.says("metric"))
    status_message = tzk.expect_error(404, tz.feedback, metric_name="no_such_metric", value=1, inference_id=response.inference_id)
    assert "no_such_metric" in status_message


def test_a_streamed_inference_is_stored_once_its_stream_ends(tz: TensorZeroGateway, tz_server: kit.NimbusServer) -> None:
    chunks = list(tz.inference(function_name="draft_email", input=tzk.email_input(), variant_name="formal", stream=True))
    stored = record(tz_server, chunks[0].inference_id)
    text = "".join(block.text for chunk in chunks for block in chunk.content if block.type == "text")
    assert stored["output"] == [{"type": "text", "text": text}]
    assert stored["usage"]["output_tokens"] == [c.usage for c in chunks if c.usage][0].output_tokens


def test_a_cache_hit_is_stored_as_cached(tz: TensorZeroGateway, tz_server: kit.NimbusServer) -> None:
    request = {"function_name": "relay", "input": tzk.says(tzk.tag()), "cache_options": {"enabled": "on"}}
    first = tz.inference(**request)
    record(tz_server, first.inference_id)
    # The cache entry, like the record, is written just after the answer: a busy machine may
    # answer the next request first (a miss); a hit comes within a few tries.
    for _ in range(40):
        hit = tz.inference(**request)
        stored = record(tz_server, hit.inference_id)
        if stored["cached"]:
            break
        time.sleep(0.05)
    assert stored["cached"] is True and stored["model_calls"][0]["cached"] is True
