"""The cases of test_tensorzero_differential.py: why comparisons differ today (issue 30 items, or
differences the issue does not list), the scenarios run through both gateways, the single upstream
fields compared one at a time, and the bad inputs whose error statuses are compared."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

# --------------------------------------------------------------------------------------------
# Why comparisons differ today
# --------------------------------------------------------------------------------------------

ORDER = (
    "#30 §1 item 3: Nimbus sorts the keys of what it sends upstream (messages' role/content, tools, schemas, extra_body values)"
)
JSON_ON = "#30 §1 item 2: json_mode=on without TensorZero's 'Respond using JSON.' system message"
SCHEMA_LOST = "#30 §1 item 1: json_schema response_format on a tensorzero::model_name:: target goes upstream as json_object"
REASONING = "#30 §1 item 4: an upstream reasoning_content is dropped instead of becoming a thought block"
REASONING_INPUT = (
    "#30 §1 item 4: an input thought block is dropped (TensorZero sends it as the assistant message's reasoning_content)"
)
PROVIDER_TYPE = "#30 §1 item 5: raw_response/raw_usage provider_type is the provider's name (mock), not its type (openai)"
RESERVED_TAG = "#30 §1 item 6: a tensorzero:: tag is accepted (TensorZero: 400)"
SCOPE = "#30 §1 item 7: extra_body/extra_headers scoped to a missing model or provider are accepted (TensorZero: 400)"
UNKNOWN_MODEL = "#30 §1 item 8: an unknown model_name is a 404 (TensorZero: 400)"
PINNED_FAILURE = "#30 §1 item 9: a pinned variant whose model fails answers 502 (TensorZero: the model error's 500)"
MAX_TOKENS = "#30 §1 item 10: max_tokens goes upstream as max_tokens (TensorZero's openai provider: max_completion_tokens)"
ALLOWED_TOOLS = (
    "#30 §1 item 11: allowed_tools restricts the tools sent (TensorZero: all of them plus an allowed_tools tool_choice)"
)
STREAM_ORIGINAL = "#30 §1 item 12: streaming with include_original_response is a 400 (TensorZero: original_chunk per chunk)"
RETRIES = "#30 §1 item 14: Nimbus makes 3 attempts on a failing provider (TensorZero: 1)"
ENSEMBLE_PROMPTS = (
    "by design: the best-of-n judge's and mixture-of-n fuser's prompts are worded by Nimbus (same structure, own text), "
    "and candidates are recorded in the order they reach the mock"
)
BEST_OF_N_STREAM = (
    "not in the issue: a streamed best-of-n answer is one chunk from Nimbus (content, usage and finish_reason); "
    "TensorZero sends the content chunk, then usage and finish_reason in a chunk of their own"
)
# Not in the issue.
STREAM_FLAG = "not in the issue: TensorZero sends `stream: false` upstream on a non-streamed request, Nimbus leaves `stream` out"
ACCEPT = (
    "not in the issue: a streamed upstream request carries `accept: text/event-stream` from TensorZero, `accept: */*` from Nimbus"
)
F32 = (
    "not in the issue: TensorZero sends temperature/presence_penalty/frequency_penalty as f32 widened to f64 "
    "(0.1 -> 0.10000000149011612, 0.9 -> 0.8999999761581421), Nimbus the value as written"
)
TOOL_STRICT = "not in the issue: TensorZero puts a tool's `strict` beside `function` (tools[i].strict), Nimbus inside it (tools[i].function.strict)"
RESPOND_TOOL = (
    "not in the issue: json_mode=tool's implicit `respond` tool is described 'Respond to the user using the output schema "
    "provided.' by TensorZero, 'Respond to the user with this tool, in JSON matching its parameters.' by Nimbus"
)
STREAM_END = (
    "not in the issue: TensorZero's last /inference chunk carries finish_reason and usage together; Nimbus puts "
    "finish_reason on the last content chunk and usage on one chunk more"
)
OPENAI_REPLY = (
    "not in the issue: TensorZero's /openai/v1 reply has `service_tier: null`, `usage.tensorzero_cost: null` and no "
    "choices[].logprobs; Nimbus's has `logprobs: null` and neither of the others"
)
OPENAI_STREAM = (
    "not in the issue: TensorZero's /openai/v1 chunks carry `service_tier: null` and `usage: null`, and finish_reason "
    "comes in a last chunk of its own with an empty delta; Nimbus's have neither key and finish_reason rides on the last content chunk"
)
ASSISTANT_CONTENT = "not in the issue: an assistant message holding only tool calls goes upstream without `content` from TensorZero, with `content: null` from Nimbus"
OBSERVABILITY = (
    "not in the issue: Nimbus refuses `[gateway.observability]` (unknown field), which TensorZero configs commonly carry"
)


# Fixed on main: a comparison that differed only for these now passes (and must keep passing).
FIXED = frozenset(
    {ORDER, PROVIDER_TYPE, PINNED_FAILURE, MAX_TOKENS, ALLOWED_TOOLS, SCHEMA_LOST, RETRIES, UNKNOWN_MODEL, RESERVED_TAG, SCOPE}
)


def still_open(reasons: tuple[str, ...]) -> tuple[str, ...]:
    """The reasons a comparison still differs for, fixed items left out."""
    return tuple(reason for reason in reasons if reason not in FIXED)


def because(*reasons: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason="; ".join(reasons))


# --------------------------------------------------------------------------------------------
# The scenarios: each is run once through both gateways; one test compares the replies, one the
# upstream requests (`Scenario.reply` / `.upstream`: empty if they agree today, else why they differ).
# --------------------------------------------------------------------------------------------

STRICT_JSON = '{"zeta": "z", "alpha": 1, "middle": ["m"]}'


def says(text: str, system: Any = None) -> dict[str, Any]:
    value: dict[str, Any] = {"messages": [{"role": "user", "content": text}]}
    if system is not None:
        value["system"] = system
    return value


def said(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


@dataclass
class Scenario:
    name: str
    inference: dict[str, Any] | None = None  # /inference keyword arguments
    openai: dict[str, Any] | None = None  # /openai/v1/chat/completions body
    reply: tuple[str, ...] = ()  # why the replies differ today
    upstream: tuple[str, ...] = ()  # why the upstream requests differ today
    variants: bool = False  # needs best-of-n / mixture-of-n
    concurrent: bool = False  # upstream requests made concurrently: compared as a set


BASE = (ORDER, STREAM_FLAG)  # every non-streamed request today
BASE_STREAMED = (ORDER, ACCEPT)  # every streamed request today

SCENARIOS = [
    # Chat functions.
    Scenario("plain", {"function_name": "plain", "input": says("Hello plain")}, upstream=BASE),
    Scenario(
        "sampling_params",
        {"function_name": "plain", "variant_name": "tuned", "input": says("Hello tuned")},
        upstream=(*BASE, F32),
    ),
    Scenario(
        "max_tokens",
        {"function_name": "plain", "variant_name": "capped", "input": says("Hello capped")},
        upstream=(*BASE, MAX_TOKENS),
    ),
    Scenario(
        "inference_params",
        {
            "function_name": "plain",
            "params": {"chat_completion": {"temperature": 0.9, "seed": 3, "max_tokens": 10}},
            "input": says("Hello params"),
        },
        upstream=(*BASE, F32, MAX_TOKENS),
    ),
    Scenario("config_edits", {"function_name": "plain", "variant_name": "edited", "input": says("Hello edited")}, upstream=BASE),
    Scenario(
        "request_edits",
        {
            "function_name": "plain",
            "input": says("Hello request edits"),
            "extra_body": [
                {"pointer": "/request_set", "value": {"z": 1, "a": 2}},
                {"variant_name": "main", "pointer": "/for_variant", "value": 1},
                {"model_name": "mock", "provider_name": "mock", "pointer": "/for_provider", "value": True},
            ],
            "extra_headers": [
                {"name": "x-request", "value": "request"},
                {"variant_name": "main", "name": "x-for-variant", "value": "v"},
            ],
        },
        upstream=BASE,
    ),
    Scenario("tags", {"function_name": "plain", "tags": {"user": "u1", "team": "t"}, "input": says("Hello tags")}, upstream=BASE),
    Scenario("model_name", {"model_name": "mock", "input": says("Hello model")}, upstream=BASE),
    Scenario(
        "templates",
        {
            "function_name": "greet",
            "input": {
                "system": {"persona": "a pirate", "mood": "jolly"},
                "messages": [{"role": "user", "content": [{"type": "text", "arguments": {"name": "Bob", "tag": "t1"}}]}],
            },
        },
        upstream=BASE,
    ),
    Scenario(
        "tools", {"function_name": "assist", "input": says("What time is it? [call:get_time]")}, upstream=(*BASE, TOOL_STRICT)
    ),
    Scenario(
        "allowed_tools",
        {"function_name": "assist", "allowed_tools": ["get_time"], "input": says("Time only")},
        upstream=(*BASE, TOOL_STRICT, ALLOWED_TOOLS),
    ),
    Scenario(
        "tool_result_turn",
        {
            "function_name": "assist",
            "input": {
                "messages": [
                    {"role": "user", "content": "What time is it?"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_call", "id": "call_1", "name": "get_time", "arguments": {"zone": "UTC"}}],
                    },
                    {"role": "user", "content": [{"type": "tool_result", "id": "call_1", "name": "get_time", "result": "noon"}]},
                ]
            },
        },
        upstream=(*BASE, TOOL_STRICT, ASSISTANT_CONTENT),
    ),
    Scenario(
        "thought_input",
        {
            "function_name": "plain",
            "input": {
                "messages": [
                    {"role": "user", "content": "Think about it"},
                    {
                        "role": "assistant",
                        "content": [{"type": "thought", "text": "Earlier thinking."}, {"type": "text", "text": "Done."}],
                    },
                    {"role": "user", "content": "And now?"},
                ]
            },
        },
        upstream=(*BASE, REASONING_INPUT),
    ),
    Scenario(
        "include_original_response",
        {"function_name": "plain", "include_original_response": True, "input": says("Hello original")},
        upstream=BASE,
    ),
    Scenario(
        "raw_response",
        {"function_name": "plain", "include_raw_response": True, "include_raw_usage": True, "input": says("Hello raw")},
        reply=(PROVIDER_TYPE,),
        upstream=BASE,
    ),
    Scenario(
        "reasoning", {"function_name": "plain", "input": says("Think first [reasoning]")}, reply=(REASONING,), upstream=BASE
    ),
    # Json functions, one per json_mode.
    Scenario("json_strict", {"function_name": "extract", "input": says(f"Extract <say>{STRICT_JSON}</say>")}, upstream=BASE),
    Scenario(
        "json_on",
        {"function_name": "extract", "variant_name": "on", "input": says(f"Pull it out <say>{STRICT_JSON}</say>")},
        upstream=(*BASE, JSON_ON),
    ),
    Scenario(
        "json_tool",
        {"function_name": "extract", "variant_name": "tool", "input": says("Pull it out [call:respond]")},
        upstream=(*BASE, TOOL_STRICT, RESPOND_TOOL),
    ),
    Scenario(
        "json_output_schema",
        {
            "function_name": "extract",
            "output_schema": {
                "type": "object",
                "properties": {"yes": {"type": "boolean"}, "because": {"type": "string"}},
                "required": ["yes"],
            },
            "input": says('Dynamic schema <say>{"yes": true}</say>'),
        },
        upstream=BASE,
    ),
    # Streaming.
    Scenario(
        "stream",
        {"function_name": "plain", "stream": True, "input": says("Hello stream")},
        reply=(STREAM_END,),
        upstream=BASE_STREAMED,
    ),
    Scenario(
        "stream_tools",
        {"function_name": "assist", "stream": True, "input": says("Time? [call:get_time]")},
        reply=(STREAM_END,),
        upstream=(*BASE_STREAMED, TOOL_STRICT),
    ),
    Scenario(
        "stream_json",
        {"function_name": "extract", "stream": True, "input": says(f"Stream it <say>{STRICT_JSON}</say>")},
        reply=(STREAM_END,),
        upstream=BASE_STREAMED,
    ),
    Scenario(
        "stream_original_response",
        {"function_name": "plain", "stream": True, "include_original_response": True, "input": says("Hello original stream")},
        reply=(STREAM_ORIGINAL,),
        upstream=(STREAM_ORIGINAL,),
    ),
    # Failures.
    Scenario("upstream_fails", {"function_name": "plain", "input": says("Fail [upstream-fails]")}, upstream=(*BASE, RETRIES)),
    Scenario(
        "pinned_upstream_fails",
        {"function_name": "plain", "variant_name": "main", "input": says("Fail pinned [upstream-fails]")},
        reply=(PINNED_FAILURE,),
        upstream=(*BASE, RETRIES),
    ),
    # The OpenAI-compatible route.
    Scenario(
        "openai_function",
        openai={"model": "tensorzero::function_name::plain", "messages": said("Hello openai")},
        reply=(OPENAI_REPLY,),
        upstream=BASE,
    ),
    Scenario(
        "openai_params",
        openai={
            "model": "tensorzero::function_name::plain",
            "messages": said("Hello openai params"),
            "temperature": 0.5,
            "seed": 9,
            "tensorzero::variant_name": "main",
            "tensorzero::tags": {"user": "u2"},
        },
        reply=(OPENAI_REPLY,),
        upstream=BASE,
    ),
    Scenario(
        "openai_max_tokens",
        openai={"model": "tensorzero::model_name::mock", "max_tokens": 5, "messages": said("Hello max")},
        reply=(OPENAI_REPLY,),
        upstream=(*BASE, MAX_TOKENS),
    ),
    Scenario(
        "openai_json_schema",
        openai={
            "model": "tensorzero::model_name::mock",
            "messages": said("Hello json schema"),
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "reply",
                    "strict": True,
                    "schema": {
                        "type": "object",
                        "properties": {"z": {"type": "string"}, "a": {"type": "string"}},
                        "required": ["z", "a"],
                        "additionalProperties": False,
                    },
                },
            },
        },
        reply=(OPENAI_REPLY,),
        upstream=(*BASE, SCHEMA_LOST),
    ),
    Scenario(
        "openai_tools",
        openai={"model": "tensorzero::function_name::assist", "messages": said("Time? [call:get_time]")},
        reply=(OPENAI_REPLY,),
        upstream=(*BASE, TOOL_STRICT),
    ),
    Scenario(
        "openai_json_function",
        openai={"model": "tensorzero::function_name::extract", "messages": said(f"Openai json <say>{STRICT_JSON}</say>")},
        reply=(OPENAI_REPLY,),
        upstream=BASE,
    ),
    Scenario(
        "openai_stream",
        openai={"model": "tensorzero::function_name::plain", "stream": True, "messages": said("Hello openai stream")},
        reply=(OPENAI_STREAM,),
        upstream=BASE_STREAMED,
    ),
    # Best-of-n and mixture-of-n (the judge picks candidate 0, `a`; the fuser answers "Fused answer").
    *[
        Scenario(
            f"{function}_{variant}{'_stream' if stream else ''}",
            {
                "function_name": function,
                "variant_name": variant,
                "stream": stream,
                "input": says(f"Which is best ({function} {variant} {stream})?"),
            },
            reply=() if not stream else (BEST_OF_N_STREAM,) if variant == "best" else (STREAM_END,),
            upstream=(ENSEMBLE_PROMPTS, *BASE),
            variants=True,
            concurrent=True,
        )
        for function in ("panel", "json_panel")
        for variant in ("best", "mixed")
        for stream in (False, True)
    ],
]


# --------------------------------------------------------------------------------------------
# One difference at a time: (name, scenario, the field of its upstream requests, why it differs today),
# so each item shows alone.
# --------------------------------------------------------------------------------------------

Extract = Callable[[list[dict[str, Any]]], Any]


def first_body(pick: Callable[[dict[str, Any]], Any]) -> Extract:
    return lambda sent: pick(sent[0]["body"])


FOCUSED: list[tuple[str, str, Extract, tuple[str, ...]]] = [
    ("message_key_order", "plain", first_body(lambda body: body["messages"]), (ORDER,)),
    ("schema_key_order", "json_strict", first_body(lambda body: body["response_format"]["json_schema"]["schema"]), (ORDER,)),
    (
        "tool_parameters_key_order",
        "tools",
        first_body(lambda body: [t["function"]["parameters"] for t in body["tools"]]),
        (ORDER,),
    ),
    ("extra_body_value_key_order", "request_edits", first_body(lambda body: body["request_set"]), (ORDER,)),
    ("stream_false", "plain", first_body(lambda body: body.get("stream", "<absent>")), (STREAM_FLAG,)),
    ("accept_header", "stream", lambda sent: sent[0]["headers"].get("accept"), (ACCEPT,)),
    (
        "sampling_floats",
        "sampling_params",
        first_body(lambda body: [body.get(k) for k in ("temperature", "presence_penalty", "frequency_penalty")]),
        (F32,),
    ),
    ("integer_params", "sampling_params", first_body(lambda body: [body.get(k) for k in ("seed", "top_p", "stop")]), ()),
    (
        "max_tokens_key",
        "max_tokens",
        first_body(lambda body: {k: body[k] for k in ("max_tokens", "max_completion_tokens") if k in body}),
        (MAX_TOKENS,),
    ),
    (
        "tool_strict_place",
        "tools",
        first_body(lambda body: [("strict" in t, "strict" in t["function"]) for t in body["tools"]]),
        (TOOL_STRICT,),
    ),
    (
        "tool_names_and_choice",
        "tools",
        first_body(
            lambda body: (
                [t["function"]["name"] for t in body["tools"]],
                body.get("tool_choice"),
                body.get("parallel_tool_calls"),
            )
        ),
        (),
    ),
    (
        "allowed_tools",
        "allowed_tools",
        first_body(lambda body: ([t["function"]["name"] for t in body["tools"]], body.get("tool_choice"))),
        (ALLOWED_TOOLS,),
    ),
    ("json_on_messages", "json_on", first_body(lambda body: [(m["role"], m["content"]) for m in body["messages"]]), (JSON_ON,)),
    ("json_on_response_format", "json_on", first_body(lambda body: body.get("response_format")), ()),
    (
        "respond_tool_description",
        "json_tool",
        first_body(lambda body: body["tools"][0]["function"].get("description")),
        (RESPOND_TOOL,),
    ),
    (
        "openai_response_format",
        "openai_json_schema",
        first_body(lambda body: body["response_format"].get("type")),
        (SCHEMA_LOST,),
    ),
    ("template_rendering", "templates", first_body(lambda body: [(m["role"], m["content"]) for m in body["messages"]]), ()),
    (
        "edits_values",
        "config_edits",
        first_body(lambda body: {k: body.get(k) for k in ("variant_set", "provider_set", "layered")}),
        (ORDER,),
    ),
    ("edits_headers", "config_edits", lambda sent: {k: v for k, v in sent[0]["headers"].items() if k.startswith("x-")}, ()),
    (
        "request_edits_headers",
        "request_edits",
        lambda sent: {k: v for k, v in sent[0]["headers"].items() if k.startswith("x-")},
        (),
    ),
    ("attempts_on_failure", "upstream_fails", len, (RETRIES,)),
    (
        "input_thought",
        "thought_input",
        first_body(lambda body: [(m["role"], m["content"], m.get("reasoning_content")) for m in body["messages"]]),
        (REASONING_INPUT,),
    ),
    (
        "assistant_tool_call_content",
        "tool_result_turn",
        first_body(lambda body: "content" in body["messages"][1]),
        (ASSISTANT_CONTENT,),
    ),
    (
        "tool_call_and_result_messages",
        "tool_result_turn",
        first_body(lambda body: [(m["role"], m.get("tool_calls"), m.get("tool_call_id")) for m in body["messages"]]),
        (),
    ),
]


# The same for replies: (name, scenario, the field of its reply, why it differs today).
REPLY_FIELDS: list[tuple[str, str, Callable[[Any], Any], tuple[str, ...]]] = [
    ("parsed_key_order", "json_strict", lambda reply: list(reply["output"]["parsed"]), (ORDER,)),
    ("raw_usage_data_key_order", "raw_response", lambda reply: list(reply["raw_usage"][0]["data"]), (ORDER,)),
    ("openai_message_key_order", "openai_json_function", lambda reply: list(reply["choices"][0]["message"]), (ORDER,)),
    (
        "openai_content_key_order",
        "openai_json_function",
        lambda reply: list(json.loads(reply["choices"][0]["message"]["content"])),
        (),
    ),
    (
        "openai_usage",
        "openai_function",
        lambda reply: {k: v for k, v in reply["usage"].items() if k != "tensorzero_cost"},
        (ORDER,),
    ),
    ("openai_model", "openai_tools", lambda reply: (reply["model"], reply["object"], reply.get("system_fingerprint")), ()),
]


# --------------------------------------------------------------------------------------------
# Bad input: (name, /inference keyword arguments, why the error statuses differ today).
# --------------------------------------------------------------------------------------------

BAD_INPUT = [
    ("unknown_function", {"function_name": "nope", "input": says("x")}, ()),
    ("unknown_variant", {"function_name": "plain", "variant_name": "nope", "input": says("x")}, ()),
    ("unknown_model_name", {"model_name": "nope", "input": says("x")}, (UNKNOWN_MODEL,)),
    ("reserved_tag", {"function_name": "plain", "tags": {"tensorzero::mine": "1"}, "input": says("x")}, (RESERVED_TAG,)),
    (
        "extra_body_missing_model",
        {"function_name": "plain", "extra_body": [{"model_name": "nope", "pointer": "/a", "value": 1}], "input": says("x")},
        (SCOPE,),
    ),
    (
        "extra_body_missing_provider",
        {
            "function_name": "plain",
            "extra_body": [{"model_name": "mock", "provider_name": "nope", "pointer": "/a", "value": 1}],
            "input": says("x"),
        },
        (SCOPE,),
    ),
    (
        "extra_headers_missing_model",
        {"function_name": "plain", "extra_headers": [{"model_name": "nope", "name": "x-a", "value": "1"}], "input": says("x")},
        (SCOPE,),
    ),
    ("schema_violation", {"function_name": "greet", "input": {"system": {"mood": "no persona"}, "messages": []}}, ()),
    (
        "template_for_templateless",
        {
            "function_name": "plain",
            "input": {"messages": [{"role": "user", "content": [{"type": "template", "name": "nope", "arguments": {}}]}]},
        },
        (),
    ),
]
