"""Tools through the real `tensorzero` client: configured tools, `additional_tools`, `allowed_tools`,
`tool_choice` (auto/required/specific/none) and `parallel_tool_calls`. The dummy answers forced
tool calls with arguments valid against the tool's schema; `tools_relay` on the recording
upstream shows what the model was offered."""

from __future__ import annotations

from typing import Any

from tensorzero import FinishReason, TensorZeroGateway

import tensorzero_kit as tzk
from mock_upstream import TOOL_ARGUMENTS, RecordingUpstream

FORECAST_TOOL = {
    "name": "get_forecast",
    "description": "Forecast for a city and a number of days",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"],
        "additionalProperties": False,
    },
}


def offered(request_body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request_body.get("tools") or []]


def test_a_configured_tool_is_called_with_valid_arguments(tz: TensorZeroGateway) -> None:
    response = tz.inference(function_name="weather_assistant", input=tzk.says("Weather in Oslo?"), tool_choice="required")
    assert response.finish_reason == FinishReason.TOOL_CALL
    [call] = response.content
    assert call.type == "tool_call"
    assert call.raw_name == "get_weather" and call.name == "get_weather"
    assert call.id
    assert set(call.arguments) == {"city", "unit"}
    assert call.arguments["unit"] in ("celsius", "fahrenheit")
    assert isinstance(call.raw_arguments, str) and call.raw_arguments.startswith("{")


def test_the_functions_tools_and_tool_settings_reach_the_model(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    marker = tzk.tag()
    tz.inference(function_name="tools_relay", input=tzk.says(marker))
    sent = tz_upstream.one_with_text(marker).body
    assert offered(sent) == ["get_weather", "get_time"]
    weather = sent["tools"][0]["function"]
    assert weather["description"] == "Current weather for a city"
    assert weather["parameters"]["required"] == ["city", "unit"]
    assert weather.get("strict") is True
    assert sent["tool_choice"] == "auto"


def test_allowed_tools_goes_as_openais_allowed_tools_choice(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    """As TensorZero's `openai` provider: every tool is sent, and the allowed ones are the tool choice."""
    marker = tzk.tag()
    tz.inference(function_name="tools_relay", input=tzk.says(marker), allowed_tools=["get_time"])
    sent = tz_upstream.one_with_text(marker).body
    assert offered(sent) == ["get_weather", "get_time"]
    assert sent["tool_choice"] == {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "get_time"}}]},
    }


def test_additional_tools_are_offered_beside_the_configured_ones(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    marker = tzk.tag()
    tz.inference(
        function_name="tools_relay",
        input=tzk.says(marker),
        additional_tools=[FORECAST_TOOL],
        allowed_tools=["get_weather"],
        parallel_tool_calls=True,
    )
    sent = tz_upstream.one_with_text(marker).body
    assert offered(sent) == ["get_weather", "get_time", "get_forecast"]
    assert [t["function"]["name"] for t in sent["tool_choice"]["allowed_tools"]["tools"]] == ["get_weather", "get_forecast"]
    forecast = sent["tools"][2]["function"]
    assert forecast["parameters"] == FORECAST_TOOL["parameters"]
    assert forecast["description"] == FORECAST_TOOL["description"]
    assert sent["parallel_tool_calls"] is True


def test_an_additional_tool_can_be_forced_by_name(tz: TensorZeroGateway) -> None:
    response = tz.inference(
        function_name="weather_assistant",
        input=tzk.says("Forecast for Oslo?"),
        additional_tools=[FORECAST_TOOL],
        tool_choice={"specific": "get_forecast"},
    )
    [call] = response.content
    assert call.type == "tool_call"
    assert call.raw_name == "get_forecast" and call.name == "get_forecast"
    assert set(call.arguments) == {"city", "days"} and 1 <= call.arguments["days"] <= 7


def test_tool_choice_specific_and_none_reach_the_model(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    specific, none = tzk.tag(), tzk.tag()
    tz.inference(function_name="tools_relay", input=tzk.says(specific), tool_choice={"specific": "get_time"})
    assert tz_upstream.one_with_text(specific).body["tool_choice"] == {"type": "function", "function": {"name": "get_time"}}
    tz.inference(function_name="tools_relay", input=tzk.says(none), tool_choice="none")
    assert tz_upstream.one_with_text(none).body["tool_choice"] == "none"


def test_tool_choice_none_gets_text_from_the_dummy(tz: TensorZeroGateway) -> None:
    response = tz.inference(function_name="weather_assistant", input=tzk.says("Weather in Oslo?"), tool_choice="none")
    assert [block.type for block in response.content] == ["text"]
    assert response.finish_reason == FinishReason.STOP


def test_parallel_tool_calls_is_passed_only_when_set(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    unset, off = tzk.tag(), tzk.tag()
    tz.inference(function_name="tools_relay", input=tzk.says(unset))
    assert "parallel_tool_calls" not in tz_upstream.one_with_text(unset).body
    tz.inference(function_name="tools_relay", input=tzk.says(off), parallel_tool_calls=False)
    assert tz_upstream.one_with_text(off).body["parallel_tool_calls"] is False


def test_a_tool_result_turn_goes_back_to_the_model(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    marker = tzk.tag()
    tz.inference(
        function_name="tools_relay",
        input={
            "messages": [
                {"role": "user", "content": marker},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_call", "id": "call_1", "name": "get_time", "arguments": {"zone": "UTC"}}],
                },
                {"role": "user", "content": [{"type": "tool_result", "id": "call_1", "name": "get_time", "result": "12:00"}]},
            ]
        },
    )
    messages = tz_upstream.one_with_text(marker).body["messages"]
    assistant = messages[1]
    assert assistant["role"] == "assistant"
    [call] = assistant["tool_calls"]
    assert call["id"] == "call_1" and call["function"]["name"] == "get_time"
    assert call["function"]["arguments"] in ('{"zone":"UTC"}', '{"zone": "UTC"}')
    assert messages[2] == {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}


def test_forcing_or_allowing_a_tool_that_is_not_there_is_a_400(tz: TensorZeroGateway) -> None:
    message = tzk.expect_error(
        400, tz.inference, function_name="weather_assistant", input=tzk.says("x"), tool_choice={"specific": "get_time"}
    )
    assert "get_time" in message
    message = tzk.expect_error(
        400, tz.inference, function_name="weather_assistant", input=tzk.says("x"), allowed_tools=["no_such_tool"]
    )
    assert "no_such_tool" in message


# --------------------------------------------------------------------------------------------
# Tool calls as the model answers them (the recording upstream)
# --------------------------------------------------------------------------------------------


def test_a_valid_call_of_an_offered_tool_is_parsed(tz: TensorZeroGateway) -> None:
    response = tz.inference(function_name="tools_relay", input=tzk.says("[call:get_time]"))
    assert response.finish_reason == FinishReason.TOOL_CALL
    [call] = response.content
    assert (call.id, call.raw_name, call.name) == ("call_up_1", "get_time", "get_time")
    assert call.raw_arguments == TOOL_ARGUMENTS
    assert call.arguments == {"zone": "UTC"}


def test_a_call_of_a_tool_that_was_not_offered_has_no_name_or_arguments(tz: TensorZeroGateway) -> None:
    response = tz.inference(function_name="tools_relay", input=tzk.says("[call:launch_rocket]"))
    [call] = response.content
    assert call.raw_name == "launch_rocket" and call.raw_arguments == TOOL_ARGUMENTS
    assert call.name is None and call.arguments is None


def test_a_call_with_arguments_that_are_not_json_keeps_them_raw(tz: TensorZeroGateway) -> None:
    response = tz.inference(function_name="tools_relay", input=tzk.says("[call-garbled:get_time]"))
    [call] = response.content
    assert call.name == "get_time" and call.arguments is None
    assert call.raw_arguments == "{not json"


def test_a_streamed_upstream_tool_call_arrives_in_pieces(tz: TensorZeroGateway) -> None:
    chunks = list(tz.inference(function_name="tools_relay", input=tzk.says("[call:get_time]"), stream=True))
    calls = [block for c in chunks for block in c.content if block.type == "tool_call"]
    assert len(calls) == 2
    assert [call.raw_name for call in calls] == ["get_time", ""]
    assert {call.id for call in calls} == {"call_up_1"}
    assert "".join(call.raw_arguments for call in calls) == TOOL_ARGUMENTS
    assert [c.finish_reason for c in chunks if c.finish_reason] == [FinishReason.TOOL_CALL]
