"""Streamed `/inference` through the real `tensorzero` client: chat, tool-call and json chunks, the
final usage and finish reason, fallback before the first chunk, timeouts, and an error event
mid-stream (the recording upstream breaks off on `[stream-breaks]`)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import requests
from tensorzero import FinishReason, TensorZeroGateway
from tensorzero.types import ChatChunk, JsonChunk

import nimbus_testkit as kit
import tensorzero_kit as tzk
from mock_upstream import STALL_SECONDS, STREAM_BREAK_MARKER, STREAM_STALL_MARKER, RecordingUpstream


def one_inference(chunks: list[Any]) -> None:
    """Every chunk belongs to the same inference, episode and variant."""
    assert chunks, "no chunks"
    assert len({(c.inference_id, c.episode_id, c.variant_name) for c in chunks}) == 1


def final_usage(chunks: list[Any]) -> Any:
    usages = [c.usage for c in chunks if c.usage is not None]
    assert len(usages) == 1, usages
    return usages[0]


def finish_reasons(chunks: list[Any]) -> list[FinishReason]:
    return [c.finish_reason for c in chunks if c.finish_reason is not None]


def test_a_streamed_chat_answer_matches_the_whole_one(tz: TensorZeroGateway) -> None:
    whole = tz.inference(function_name="draft_email", input=tzk.email_input(), variant_name="formal")
    chunks = list(tz.inference(function_name="draft_email", input=tzk.email_input(), variant_name="formal", stream=True))
    assert all(isinstance(c, ChatChunk) for c in chunks)
    one_inference(chunks)
    assert chunks[0].variant_name == "formal"
    texts = [block for c in chunks for block in c.content if block.type == "text"]
    assert len(texts) > 1, "the answer should come in several pieces"
    assert {block.id for block in texts} == {"0"}
    assert "".join(block.text for block in texts) == tzk.text_of(whole)
    usage = final_usage(chunks)
    assert (usage.input_tokens, usage.output_tokens) == (whole.usage.input_tokens, whole.usage.output_tokens)
    assert finish_reasons(chunks) == [FinishReason.STOP]


def test_a_streamed_answer_from_the_upstream(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    marker = tzk.tag()
    chunks = list(tz.inference(function_name="relay", input=tzk.says(marker), stream=True))
    one_inference(chunks)
    assert "".join(b.text for c in chunks for b in c.content if b.type == "text") == "Hello from choice 0"
    assert finish_reasons(chunks) == [FinishReason.STOP]
    usage = final_usage(chunks)
    assert (usage.input_tokens, usage.output_tokens) == (4, 4)
    sent = tz_upstream.one_with_text(marker).body
    assert sent["stream"] is True


def test_a_streamed_tool_call_names_the_tool_first(tz: TensorZeroGateway) -> None:
    chunks = list(
        tz.inference(function_name="weather_assistant", input=tzk.says("Weather?"), tool_choice="required", stream=True)
    )
    one_inference(chunks)
    calls = [block for c in chunks for block in c.content if block.type == "tool_call"]
    assert calls and calls[0].raw_name == "get_weather"
    assert len({call.id for call in calls}) == 1
    arguments = "".join(call.raw_arguments for call in calls)
    whole = tz.inference(function_name="weather_assistant", input=tzk.says("Weather?"), tool_choice="required")
    assert arguments == whole.content[0].raw_arguments
    assert finish_reasons(chunks) == [FinishReason.TOOL_CALL]


def test_a_streamed_json_answer_joins_to_the_whole_raw_output(tz: TensorZeroGateway) -> None:
    document = {"type": "template", "name": "document", "arguments": {"document": "Hi, I'm Bob"}}
    request = {"function_name": "extract_contact", "input": {"messages": [{"role": "user", "content": [document]}]}}
    whole = tz.inference(**request)
    chunks = list(tz.inference(**request, stream=True))
    assert all(isinstance(c, JsonChunk) for c in chunks)
    one_inference(chunks)
    assert "".join(c.raw for c in chunks) == whole.output.raw
    assert final_usage(chunks).input_tokens == whole.usage.input_tokens


def test_a_stream_falls_back_before_its_first_chunk(tz: TensorZeroGateway) -> None:
    chunks = list(tz.inference(function_name="flaky_candidate", input=tzk.says("Hello"), stream=True))
    one_inference(chunks)
    assert chunks[0].variant_name == "steady"


def test_an_upstream_error_mid_stream_reaches_the_client(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    marker = f"{STREAM_BREAK_MARKER} {tzk.tag()}"
    stream = tz.inference(function_name="relay", input=tzk.says(marker), stream=True)
    received: list[Any] = []
    message = tzk.expect_error(500, lambda: received.extend(stream) or None)
    assert "broke off" in message
    # The chunk before the break arrived first.
    assert [b.text for c in received for b in c.content] == ["Hello "]
    assert len(tz_upstream.with_text(marker)) == 1


def test_the_error_event_is_tensorzeros_shape_and_ends_the_stream(tz_server: kit.NimbusServer) -> None:
    body = {"function_name": "relay", "input": tzk.says(f"{STREAM_BREAK_MARKER} {tzk.tag()}"), "stream": True}
    response = requests.post(f"{tz_server.base_url}/inference", json=body, timeout=30, stream=True)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events, done = kit.parse_sse(response.text)
    assert not done
    assert set(events[-1]) == {"error"} and isinstance(events[-1]["error"], str)
    assert all("error" not in event for event in events[:-1])


def test_a_stream_that_misses_its_first_chunk_deadline_is_a_408(tz: TensorZeroGateway) -> None:
    message = tzk.expect_error(408, tz.inference, function_name="impatient", input=tzk.says("Hi"), stream=True)
    assert "hurried" in message


def test_a_stream_past_its_total_deadline_ends_with_an_error_event(tz: TensorZeroGateway) -> None:
    stream = tz.inference(function_name="relay_hurried", input=tzk.says(f"{STREAM_STALL_MARKER} {tzk.tag()}"), stream=True)
    received: list[Any] = []
    started = time.monotonic()
    message = tzk.expect_error(500, lambda: received.extend(stream) or None)
    assert "timeout" in message
    assert [b.text for c in received for b in c.content] == ["Hello "]
    # Cut at the deadline (1 s), well before the upstream would have gone on.
    assert time.monotonic() - started < STALL_SECONDS - 1


def test_errors_before_the_stream_starts_are_plain_statuses(tz: TensorZeroGateway) -> None:
    tzk.expect_error(404, tz.inference, function_name="no_such_function", input=tzk.says("x"), stream=True)
    tzk.expect_error(502, tz.inference, function_name="always_fails", input=tzk.says("x"), stream=True)


def test_the_async_client_streams_too(tz_server: kit.NimbusServer) -> None:
    from tensorzero import AsyncTensorZeroGateway  # noqa: PLC0415

    async def run() -> tuple[Any, list[Any]]:
        client = await AsyncTensorZeroGateway.build_http(gateway_url=tz_server.base_url, timeout=30)
        async with client:
            whole = await client.inference(function_name="draft_email", input=tzk.email_input(), variant_name="formal")
            stream = await client.inference(
                function_name="draft_email", input=tzk.email_input(), variant_name="formal", stream=True
            )
            return whole, [chunk async for chunk in stream]

    whole, chunks = asyncio.run(run())
    one_inference(chunks)
    assert "".join(b.text for c in chunks for b in c.content if b.type == "text") == tzk.text_of(whole)
