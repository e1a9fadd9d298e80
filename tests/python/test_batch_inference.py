"""`POST /batch_inference` on the local server, with plain HTTP: what each item becomes (templates,
per-item params over the variant's, the batch's one variant, per-item output schemas and tools,
tags and episodes in the stored records), and what is refused at submission (list lengths, the
failing item's index, unknown function or variant, streaming, dryrun, cache).

The functions are tensorzero_config/test_functions.toml's on the module's recording upstream,
which answers JSON for `[reply-json]` and calls a tool for `[call:NAME]`. Polling, failures and
paging are in test_batch_inference_polls.py.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

import tensorzero_kit as tzk
from batch_inference_kit import GREETING, Gateway, chat_reply, email, relay_batch
from batch_inference_kit import alpha, config, projects, upstream  # noqa: F401 - fixtures
from mock_upstream import JSON_REPLY, JSON_REPLY_MARKER, TOOL_ARGUMENTS, RecordingUpstream

ANSWER_SCHEMA = json.loads((tzk.TEST_CONFIG_DIR / "answer_schema.json").read_text())
COUNT_SCHEMA = {
    "type": "object",
    "properties": {"count": {"type": "integer"}},
    "required": ["count"],
    "additionalProperties": False,
}
FORECAST_TOOL = {
    "name": "get_forecast",
    "description": "Forecast for a city and a number of days",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": False,
}
# The variant `tuned` of `email_batch` (test_functions.toml) sets every parameter.
TUNED = {"temperature": 0.5, "max_tokens": 100, "seed": 7, "top_p": 0.9, "presence_penalty": 0.1, "frequency_penalty": 0.2}


# --------------------------------------------------------------------------------------------
# What each item becomes
# --------------------------------------------------------------------------------------------


def test_a_chat_batch_renders_templates_and_gives_each_item_its_params(alpha: Gateway, upstream: RecordingUpstream) -> None:
    first, second = tzk.tag(), tzk.tag()
    created = alpha.submit(
        {
            "function_name": "email_batch",
            "variant_name": "tuned",
            # The second in the plain-HTTP shorthand: an object `content` is the template's arguments.
            "inputs": [
                email(first),
                {"system": tzk.EMAIL_SYSTEM, "messages": [{"role": "user", "content": {"recipient": "Eve", "topic": second}}]},
            ],
            "params": {
                "chat_completion": {
                    "temperature": [0.9, None],
                    "max_tokens": [20, None],
                    "seed": [1, None],
                    "top_p": [0.5, None],
                    "presence_penalty": [0.3, None],
                    "frequency_penalty": [0.4, None],
                }
            },
        }
    )
    polled = alpha.finished(created["batch_id"])
    assert polled == {
        "status": "completed",
        "batch_id": created["batch_id"],
        "inferences": [chat_reply(created, 0, "tuned"), chat_reply(created, 1, "tuned")],
    }
    system = {"role": "system", "content": "You write short, formal business emails on behalf of Ada. Sign with their name."}
    given = {"temperature": 0.9, "max_tokens": 20, "seed": 1, "top_p": 0.5, "presence_penalty": 0.3, "frequency_penalty": 0.4}
    for topic, recipient, params in ((first, "Bob", given), (second, "Eve", TUNED)):
        sent = upstream.one_with_text(topic).body
        assert sent["messages"] == [system, {"role": "user", "content": f"Write an email to {recipient} about {topic}."}]
        # The cap goes as `max_completion_tokens`, as TensorZero's `openai` provider sends it.
        assert {name: sent.get("max_completion_tokens" if name == "max_tokens" else name) for name in TUNED} == params, sent


def test_a_variant_without_params_sends_only_the_items_own(alpha: Gateway, upstream: RecordingUpstream) -> None:
    given, unset = tzk.tag(), tzk.tag()
    created = alpha.submit(
        {
            "function_name": "email_batch",
            "variant_name": "bare",
            "inputs": [email(given), email(unset)],
            "params": {"chat_completion": {"temperature": [0.25, None], "seed": [None, None]}},
        }
    )
    polled = alpha.finished(created["batch_id"])
    assert [reply["variant_name"] for reply in polled["inferences"]] == ["bare", "bare"]
    assert upstream.one_with_text(given).body["temperature"] == 0.25
    assert not set(TUNED) & set(upstream.one_with_text(unset).body), upstream.one_with_text(unset).body


def test_one_variant_is_drawn_for_the_whole_batch_with_its_first_episode(alpha: Gateway) -> None:
    """The batch runs the variant `/inference` would draw for the first item's episode."""
    for _ in range(4):
        episode = str(tzk.uuid7_at(int(time.time() * 1000) - 1000 - uuid.uuid4().int % 100_000))
        single = alpha.http.post(
            "/inference", json={"function_name": "email_batch", "input": email("draw"), "episode_id": episode}
        )
        assert single.status_code == 200, single.text
        created = alpha.submit(
            {"function_name": "email_batch", "inputs": [email("a"), email("b"), email("c")], "episode_ids": [episode, None, None]}
        )
        polled = alpha.finished(created["batch_id"])
        variants = {reply["variant_name"] for reply in polled["inferences"]}
        assert variants == {single.json()["variant_name"]}, (variants, single.json())


def test_a_json_batch_checks_each_item_against_its_own_output_schema(alpha: Gateway, upstream: RecordingUpstream) -> None:
    tags = [tzk.tag() for _ in range(3)]
    created = alpha.submit(
        {
            "function_name": "json_strict_relay",
            "inputs": [
                tzk.says(f"{JSON_REPLY_MARKER} {tags[0]}"),
                tzk.says(f"{JSON_REPLY_MARKER} {tags[1]}"),
                tzk.says(tags[2]),
            ],
            "output_schemas": [None, COUNT_SCHEMA, None],
        }
    )
    polled = alpha.finished(created["batch_id"])
    outputs = [
        {"raw": JSON_REPLY, "parsed": json.loads(JSON_REPLY)},  # the function's schema holds
        {"raw": JSON_REPLY, "parsed": None},  # the item's schema does not
        {"raw": "Hello from choice 0", "parsed": None},  # not JSON
    ]
    expected = [
        {key: value for key, value in chat_reply(created, i, "upstream").items() if key != "content"} | {"output": output}
        for i, output in enumerate(outputs)
    ]
    assert polled == {"status": "completed", "batch_id": created["batch_id"], "inferences": expected}
    schemas = [upstream.one_with_text(tag).body["response_format"]["json_schema"]["schema"] for tag in tags]
    assert schemas == [ANSWER_SCHEMA, COUNT_SCHEMA, ANSWER_SCHEMA]
    assert alpha.record(created["inference_ids"][1])["output_schema"] == COUNT_SCHEMA


def offered(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or []]


def test_each_item_gets_its_own_tools_and_tool_settings(alpha: Gateway, upstream: RecordingUpstream) -> None:
    tags = [tzk.tag() for _ in range(3)]
    created = alpha.submit(
        {
            "function_name": "tools_relay",
            "inputs": [tzk.says(f"[call:get_time] {tags[0]}"), tzk.says(tags[1]), tzk.says(tags[2])],
            "allowed_tools": [["get_time"], ["get_weather"], None],
            "additional_tools": [None, [FORECAST_TOOL], None],
            "tool_choice": [{"specific": "get_time"}, "required", None],
            "parallel_tool_calls": [None, True, False],
        }
    )
    polled = alpha.finished(created["batch_id"])
    call = {
        "type": "tool_call",
        "id": "call_up_1",
        "raw_name": "get_time",
        "raw_arguments": TOOL_ARGUMENTS,
        "name": "get_time",
        "arguments": {"zone": "UTC"},
    }
    usage_of_call = {"input_tokens": 4, "output_tokens": 3}
    assert polled["inferences"] == [
        chat_reply(created, 0, "upstream", [call], usage=usage_of_call, finish_reason="tool_call"),
        chat_reply(created, 1, "upstream"),
        chat_reply(created, 2, "upstream"),
    ]
    sent = [upstream.one_with_text(tag).body for tag in tags]
    # As TensorZero's `openai` provider: every tool is offered, `allowed_tools` (plus the item's own
    # tools) go as OpenAI's `allowed_tools` tool choice (a specific choice becomes mode `auto`).
    assert [offered(body) for body in sent] == [
        ["get_weather", "get_time"],
        ["get_weather", "get_time", "get_forecast"],
        ["get_weather", "get_time"],
    ]
    allowed = lambda mode, *names: {  # noqa: E731
        "type": "allowed_tools",
        "allowed_tools": {"mode": mode, "tools": [{"type": "function", "function": {"name": n}} for n in names]},
    }
    assert sent[0]["tool_choice"] == allowed("auto", "get_time")
    assert sent[1]["tool_choice"] == allowed("required", "get_weather", "get_forecast")
    assert sent[2]["tool_choice"] == "auto"  # the function's
    assert sent[1]["tools"][2]["function"]["parameters"] == FORECAST_TOOL["parameters"]
    assert [body.get("parallel_tool_calls") for body in sent] == [None, True, False]
    assert "parallel_tool_calls" not in sent[0]


def test_tags_and_episode_ids_are_kept_with_each_inference(alpha: Gateway) -> None:
    episode = str(tzk.uuid7_at(int(time.time() * 1000) - 5000))
    created = alpha.submit(
        relay_batch(
            ["tagged", "untagged", "same episode"],
            episode_ids=[episode, None, episode],
            tags=[{"user_id": "1", "team": "a"}, None, {"user_id": "3"}],
            params={"chat_completion": {"max_tokens": [None, 11, None]}},
        )
    )
    episodes = created["episode_ids"]
    assert episodes[0] == episodes[2] == episode
    assert episodes[1] != episode
    polled = alpha.finished(created["batch_id"])
    assert [reply["episode_id"] for reply in polled["inferences"]] == episodes
    records = [alpha.record(inference_id) for inference_id in created["inference_ids"]]
    assert [r["inference_id"] for r in records] == created["inference_ids"]
    assert [r["episode_id"] for r in records] == episodes
    assert [r["tags"] for r in records] == [{"user_id": "1", "team": "a"}, {}, {"user_id": "3"}]
    assert {(r["function_name"], r["variant_name"], r["function_type"]) for r in records} == {("relay", "upstream", "chat")}
    # What the call ran with: the item's own and the variant's (relay's `upstream` sets temperature).
    assert records[1]["inference_params"] == {"chat_completion": {"max_tokens": 11, "temperature": 0.5}}
    assert records[0]["inference_params"] == {"chat_completion": {"temperature": 0.5}}
    single = alpha.http.post(
        "/inference",
        json={"function_name": "relay", "input": tzk.says("single"), "params": {"chat_completion": {"max_tokens": 11}}},
    )
    assert single.status_code == 200, single.text
    assert alpha.record(single.json()["inference_id"])["inference_params"] == records[1]["inference_params"]
    assert [r["output"] for r in records] == [GREETING] * 3
    feedback = alpha.http.post(
        "/feedback", json={"metric_name": "answer_quality", "value": 0.5, "inference_id": created["inference_ids"][1]}
    )
    assert feedback.status_code == 200 and set(feedback.json()) == {"feedback_id"}, feedback.text
    listed = alpha.http.get(f"/episodes/{episode}/inferences")
    assert listed.status_code == 200, listed.text
    assert [r["inference_id"] for r in listed.json()["data"]] == [created["inference_ids"][0], created["inference_ids"][2]]


# --------------------------------------------------------------------------------------------
# Refused at submission
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("episode_ids", [None]),
        ("tags", [None, None, None]),
        ("output_schemas", [None]),
        ("additional_tools", [None, None, None]),
        ("allowed_tools", []),
        ("tool_choice", [None]),
        ("parallel_tool_calls", [True, None, False]),
        ("params.chat_completion.temperature", [0.1]),
        ("params.chat_completion.max_tokens", [1, 2, 3]),
        ("params.chat_completion.seed", [1]),
        ("params.chat_completion.top_p", [0.5]),
        ("params.chat_completion.presence_penalty", [0.5]),
        ("params.chat_completion.frequency_penalty", [0.5, 0.5, 0.5]),
    ],
)
def test_a_per_item_list_of_another_length_is_a_400_naming_it(
    alpha: Gateway, upstream: RecordingUpstream, field: str, value: list[Any]
) -> None:
    marker = tzk.tag()
    body = relay_batch([marker, marker])
    if field.startswith("params."):
        body["params"] = {"chat_completion": {field.rsplit(".", 1)[1]: value}}
    else:
        body[field] = value
    message = alpha.refused(400, body)
    assert message == (
        f"`{field}` has {len(value)} entries but `inputs` has 2: every per-item list must be as long as `inputs`"
    )
    assert upstream.with_text(marker) == []


def test_an_invalid_input_is_a_400_naming_its_index(alpha: Gateway, upstream: RecordingUpstream) -> None:
    marker = tzk.tag()
    missing_recipient = {"system": tzk.EMAIL_SYSTEM, "messages": [{"role": "user", "content": {"topic": marker}}]}
    body = {"function_name": "email_batch", "inputs": [email(marker), email(marker), missing_recipient]}
    message = alpha.refused(400, body)
    assert message.startswith("Input at index 2 failed validation: "), message
    assert "`input.messages[0].content[0]`" in message and "`/required`" in message, message
    # A tool setting that does not fit the function is checked per item too.
    message = alpha.refused(
        400, relay_batch([marker, marker], function_name="tools_relay", tool_choice=[None, {"specific": "no_such_tool"}])
    )
    assert message.startswith("Input at index 1 failed validation: ") and "no_such_tool" in message, message
    message = alpha.refused(400, relay_batch([marker, marker], allowed_tools=[None, ["no_such_tool"]]))
    assert message.startswith("Input at index 1 failed validation: ") and "no_such_tool" in message, message
    message = alpha.refused(400, relay_batch([marker, marker], episode_ids=[None, str(uuid.uuid4())]))
    assert "`episode_ids[1]`" in message, message
    message = alpha.refused(400, relay_batch([marker, marker], output_schemas=[{"type": "no-such-type"}, None]))
    assert message.startswith("Input at index 0 failed validation: "), message
    assert upstream.with_text(marker) == []


def test_a_pinned_variant_that_does_not_exist_and_an_unknown_function_are_404(alpha: Gateway) -> None:
    message = alpha.refused(404, {"function_name": "email_batch", "variant_name": "no_such_variant", "inputs": [email("x")]})
    assert "no_such_variant" in message
    message = alpha.refused(404, {"function_name": "no_such_function", "inputs": [tzk.says("x")]})
    assert message == "Unknown function: no_such_function"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stream", True),
        ("dryrun", True),
        ("cache_options", {"enabled": "on", "max_age_s": None}),
        ("cache_options", {"enabled": "read_only"}),
        ("model_name", "dummy"),
    ],
)
def test_what_a_batch_cannot_do_is_a_400_naming_the_field(alpha: Gateway, field: str, value: Any) -> None:
    message = alpha.refused(400, relay_batch(["x"], **{field: value}))
    assert f"`{field}`" in message, message


def test_off_switches_are_accepted(alpha: Gateway) -> None:
    created = alpha.submit(relay_batch(["x"], stream=False, dryrun=False, cache_options={"enabled": "off"}))
    assert alpha.finished(created["batch_id"])["status"] == "completed"


def test_malformed_batches_are_400(alpha: Gateway) -> None:
    assert "`inputs`" in alpha.refused(400, {"function_name": "relay", "inputs": []})
    assert "inputs" in alpha.refused(400, {"function_name": "relay"})
    assert "function_name" in alpha.refused(400, {"inputs": [tzk.says("x")]})
    assert "no_such_key" in alpha.refused(400, relay_batch(["x"], no_such_key=1))
    assert "no_such_param" in alpha.refused(400, relay_batch(["x"], params={"chat_completion": {"no_such_param": [1]}}))
