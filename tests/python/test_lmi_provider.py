"""LMI models through the gateway, end to end: the real `openai` SDK against `nimbus serve`, whose
models call `nimbus-mock-lmi` in every LMI schema, both as `type = "lmi"` (plain HTTP to the
container's per-schema paths) and as `type = "sagemaker"` (the AWS SDK, pointed at the mock's
SageMaker runtime by `AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME`, with dummy credentials).

Checked: answers and usage, streaming with `stream_options.include_usage`, how OpenAI parameters
reach the container (the mock records each request body), tools refused with a 400 naming `tools`,
the container's 424 and in-band errors, fallback past a failing LMI provider, embeddings, and a
`/v1/batches` batch over LMI models.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import openai
import pytest

import lmi_kit
import nimbus_testkit as kit
from lmi_kit import ANSWER, REJECTED_MESSAGE, MockLmi

# model -> (the path the mock sees for a plain call, schema)
LMI_MODELS = {
    "lmi-rolling": ("/invocations", "rolling_batch"),
    "lmi-predictions": ("/predictions/my-model", "rolling_batch"),
    "lmi-tgi": ("/tgi_compat/invocations", "tgi_compat"),
    "lmi-dynamic": ("/dynamic_batch/invocations", "dynamic_batch"),
    "lmi-chat": ("/chat/invocations", "chat"),
}
SAGEMAKER_MODELS = {
    "sm-rolling": ("rolling-batch-main", "rolling_batch"),
    "sm-tgi": ("tgi-compat-main", "tgi_compat"),
    "sm-dynamic": ("dynamic-batch-main", "dynamic_batch"),
    "sm-chat": ("chat-main", "chat"),
}
CHAT_MODELS = [*LMI_MODELS, *SAGEMAKER_MODELS]
CUSTOM_TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def schema_of(model: str) -> str:
    return {**LMI_MODELS, **SAGEMAKER_MODELS}[model][1]


TEXT_GENERATION_MODELS = [m for m in CHAT_MODELS if schema_of(m) != "chat"]
# Models whose container reports `details` (finish reason, token counts).
DETAILED_MODELS = [m for m in CHAT_MODELS if schema_of(m) in {"rolling_batch", "tgi_compat"}]


def lmi_provider(url: str, schema: str | None = None, **extra: Any) -> str:
    lines = ['type = "lmi"', f'endpoint_url = "{url}"']
    if schema:
        lines.append(f'schema = "{schema}"')
    lines += [f'{key} = "{value}"' if isinstance(value, str) else f"{key} = {value}" for key, value in extra.items()]
    return "\n".join(lines)


def write_config(directory: Path, mock: MockLmi) -> Path:
    sections = ["[gateway.retries]\nmax_retries = 0\n"]

    def model(name: str, providers: dict[str, str]) -> None:
        routing = ", ".join(f'"{p}"' for p in providers)
        sections.append(f"[models.{name}]\nrouting = [{routing}]\n")
        for provider, body in providers.items():
            sections.append(f"[models.{name}.providers.{provider}]\n{body}\n")

    for name, (path, schema) in LMI_MODELS.items():
        extra = {"chat_template": "llama3"} if name == "lmi-predictions" else {}
        model(name, {"lmi": lmi_provider(f"{mock.url}{path}", schema, **extra)})
    model("lmi-embedding", {"lmi": lmi_provider(f"{mock.url}/embedding/invocations", "embedding")})
    # A template string, not a built-in name; single-quoted TOML (a literal string).
    sections.append(
        "[models.lmi-templated]\nrouting = [\"lmi\"]\n"
        f"[models.lmi-templated.providers.lmi]\ntype = \"lmi\"\nendpoint_url = \"{mock.url}/rolling_batch/invocations\"\n"
        f"chat_template = '{CUSTOM_TEMPLATE}'\n"
    )
    # Fallback: the first provider fails (the marker's first request, or nothing listening).
    model(
        "lmi-fallback",
        {"first": lmi_provider(f"{mock.url}/invocations"), "second": lmi_provider(f"{mock.url}/rolling_batch/invocations")},
    )
    model(
        "lmi-unreachable",
        {
            "down": lmi_provider(f"http://127.0.0.1:{kit.free_port()}/invocations", connect_timeout_ms=2000),
            "up": lmi_provider(f"{mock.url}/invocations"),
        },
    )
    for name, (endpoint, schema) in [*SAGEMAKER_MODELS.items(), ("sm-embedding", ("embedding-main", "embedding"))]:
        body = f'type = "sagemaker"\nendpoint_name = "{endpoint}"\nschema = "{schema}"\nregion = "us-east-1"'
        model(name, {"sm": body})
    path = directory / "nimbus.toml"
    path.write_text("\n".join(sections))
    return path


@pytest.fixture(scope="module")
def mock(logs_dir: Path) -> Iterator[MockLmi]:
    started = MockLmi(logs_dir)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def server(
    mock: MockLmi, server_factory: Callable[..., kit.NimbusServer], tmp_path_factory: pytest.TempPathFactory
) -> kit.NimbusServer:
    config = write_config(tmp_path_factory.mktemp("lmi-config"), mock)
    aws = {
        "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": mock.url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    return server_factory("nimbus-lmi", config=config, extra_env={**aws, **kit.BATCH_SERVER_ENV})


@pytest.fixture(scope="module")
def sdk(server: kit.NimbusServer) -> Iterator[openai.OpenAI]:
    with kit.make_client(server.api_base) as client:
        yield client


def tag() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def expected_path(model: str, *, stream: bool = False) -> str:
    if model in SAGEMAKER_MODELS:
        suffix = "invocations-response-stream" if stream else "invocations"
        return f"/endpoints/{SAGEMAKER_MODELS[model][0]}/{suffix}"
    return LMI_MODELS[model][0]


def only_request(mock: MockLmi, marker: str) -> dict[str, Any]:
    found = mock.requests_with(marker)
    assert len(found) == 1, found
    return found[0]


def prompt_of(body: dict[str, Any]) -> str:
    inputs = body["inputs"]
    return inputs if isinstance(inputs, str) else inputs[0]


# --------------------------------------------------------------------------------------------
# Answers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", CHAT_MODELS)
def test_chat_on_every_schema(sdk: openai.OpenAI, mock: MockLmi, model: str) -> None:
    marker = tag()
    completion = sdk.chat.completions.create(
        model=model, messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Hi {marker}"}]
    )
    choice = completion.choices[0]
    assert (choice.message.role, choice.message.content) == ("assistant", ANSWER)
    assert choice.finish_reason == "stop"
    assert completion.model == model

    sent = only_request(mock, marker)
    assert sent["path"] == expected_path(model)
    body = sent["body"]
    if model in SAGEMAKER_MODELS:
        assert sent["headers"]["authorization"].startswith("AWS4-HMAC-SHA256"), sent["headers"]
    if schema_of(model) == "chat":
        assert [m["role"] for m in body["messages"]] == ["system", "user"], body
        assert completion.usage is not None and completion.usage.completion_tokens == 3
        return
    assert marker in prompt_of(body) and "Be brief." in prompt_of(body), body
    assert "messages" not in body, body
    if model in DETAILED_MODELS:
        assert body["parameters"]["details"] is True, body
        usage = completion.usage
        assert usage is not None
        # The mock's prefill has one token per word of the prompt it got.
        assert (usage.prompt_tokens, usage.completion_tokens) == (len(prompt_of(body).split()), 3), usage
        assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_the_default_template_is_chatml_and_others_apply(sdk: openai.OpenAI, mock: MockLmi) -> None:
    marker = tag()
    sdk.chat.completions.create(model="lmi-rolling", messages=kit.user(f"chatml {marker}"))
    assert f"<|im_start|>user\nchatml {marker}<|im_end|>" in prompt_of(only_request(mock, marker)["body"])

    marker = tag()
    sdk.chat.completions.create(model="lmi-predictions", messages=kit.user(f"llama {marker}"))
    assert "<|start_header_id|>user<|end_header_id|>" in prompt_of(only_request(mock, marker)["body"])

    marker = tag()
    sdk.chat.completions.create(
        model="lmi-templated", messages=[{"role": "system", "content": "S"}, {"role": "user", "content": marker}]
    )
    assert prompt_of(only_request(mock, marker)["body"]) == f"<system>S</system><user>{marker}</user><assistant>"


@pytest.mark.parametrize("model", CHAT_MODELS)
def test_streaming_with_usage(sdk: openai.OpenAI, mock: MockLmi, model: str) -> None:
    marker = tag()
    stream = sdk.chat.completions.create(
        model=model, messages=kit.user(f"Stream {marker}"), stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ANSWER
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"], chunks
    usages = [c.usage for c in chunks if c.usage is not None]
    assert len(usages) == 1 and chunks[-1].usage is not None, chunks
    assert not chunks[-1].choices

    sent = only_request(mock, marker)
    assert sent["path"] == expected_path(model, stream=True)
    assert sent["body"].get("stream") is True, sent["body"]
    if model in DETAILED_MODELS or schema_of(model) == "chat":
        assert usages[0].completion_tokens == 3, usages
    if model in DETAILED_MODELS:
        assert usages[0].prompt_tokens == len(prompt_of(sent["body"]).split()), usages


# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["lmi-rolling", "lmi-tgi", "sm-rolling", "lmi-chat"])
def test_max_tokens_and_stop_reach_the_container(sdk: openai.OpenAI, mock: MockLmi, model: str) -> None:
    marker = tag()
    cut = sdk.chat.completions.create(model=model, messages=kit.user(f"Cut {marker}"), max_tokens=2)
    assert (cut.choices[0].message.content, cut.choices[0].finish_reason) == ("Hello from", "length")
    body = only_request(mock, marker)["body"]
    if schema_of(model) == "chat":
        assert 2 in (body.get("max_tokens"), body.get("max_completion_tokens")), body
    else:
        assert body["parameters"]["max_new_tokens"] == 2, body

    marker = tag()
    stopped = sdk.chat.completions.create(model=model, messages=kit.user(f"Stop {marker}"), stop=["from"])
    assert (stopped.choices[0].message.content, stopped.choices[0].finish_reason) == ("Hello", "stop")
    body = only_request(mock, marker)["body"]
    if schema_of(model) == "chat":
        assert body["stop"] in (["from"], "from"), body
    else:
        assert body["parameters"]["stop_sequences"] == ["from"], body


@pytest.mark.parametrize("model", ["lmi-rolling", "sm-tgi"])
def test_sampling_parameters_are_mapped(sdk: openai.OpenAI, mock: MockLmi, model: str) -> None:
    marker = tag()
    sdk.chat.completions.create(
        model=model,
        messages=kit.user(f"Sample {marker}"),
        temperature=0.5,
        top_p=0.9,
        seed=7,
        max_completion_tokens=50,
        frequency_penalty=0.25,
        presence_penalty=0.5,
    )
    parameters = only_request(mock, marker)["body"]["parameters"]
    assert parameters["temperature"] == 0.5 and parameters["do_sample"] is True, parameters
    assert (parameters["top_p"], parameters["seed"], parameters["max_new_tokens"]) == (0.9, 7, 50), parameters
    assert (parameters["frequency_penalty"], parameters["presence_penalty"]) == (0.25, 0.5), parameters


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("logprobs", True),
        ("response_format", {"type": "json_object"}),
        ("logit_bias", {"1": 5}),
        ("user", "end-user-1"),
        ("reasoning_effort", "low"),
    ],
)
@pytest.mark.parametrize("model", ["lmi-rolling", "sm-dynamic"])
def test_other_parameters_are_mapped_or_refused_never_dropped(
    sdk: openai.OpenAI, mock: MockLmi, model: str, param: str, value: Any
) -> None:
    marker = tag()
    try:
        sdk.chat.completions.create(model=model, messages=kit.user(f"Param {marker}"), **{param: value})
    except openai.BadRequestError as refused:
        assert kit.error_envelope(refused.response)["param"] == param
        assert mock.requests_with(marker) == []
        return
    sent = only_request(mock, marker)["body"]
    assert param in sent or param in sent.get("parameters", {}), f"`{param}` was dropped: {sent}"


@pytest.mark.parametrize("model", ["lmi-rolling", "sm-chat"])
def test_n_choices_each_come_from_the_container(sdk: openai.OpenAI, mock: MockLmi, model: str) -> None:
    marker = tag()
    completion = sdk.chat.completions.create(model=model, messages=kit.user(f"Twice {marker}"), n=2)
    assert [c.message.content for c in completion.choices] == [ANSWER, ANSWER]
    assert [c.index for c in completion.choices] == [0, 1]
    assert completion.usage is not None and completion.usage.completion_tokens == 6
    assert len(mock.requests_with(marker)) == 2


@pytest.mark.parametrize("model", TEXT_GENERATION_MODELS)
def test_tools_are_refused_naming_tools(sdk: openai.OpenAI, mock: MockLmi, model: str) -> None:
    marker = tag()
    tool = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
    with pytest.raises(openai.BadRequestError) as raised:
        sdk.chat.completions.create(model=model, messages=kit.user(f"Tools {marker}"), tools=[tool])
    error = kit.error_envelope(raised.value.response)
    assert error["param"] == "tools", error
    assert "tools" in error["message"], error
    assert mock.requests_with(marker) == []


@pytest.mark.parametrize("model", ["lmi-tgi", "sm-rolling"])
def test_the_finish_reason_typo_and_a_missing_prefill_are_understood(sdk: openai.OpenAI, model: str) -> None:
    typo = sdk.chat.completions.create(model=model, messages=kit.user(f"[lmi-typo] {tag()}"), max_tokens=1)
    assert (typo.choices[0].message.content, typo.choices[0].finish_reason) == ("Hello", "length")
    no_prefill = sdk.chat.completions.create(model=model, messages=kit.user(f"[lmi-no-prefill] {tag()}"))
    assert no_prefill.choices[0].message.content == ANSWER
    assert no_prefill.usage is not None and no_prefill.usage.completion_tokens == 3


# --------------------------------------------------------------------------------------------
# Errors and fallback
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["lmi-rolling", "lmi-dynamic", "lmi-chat", "sm-rolling", "sm-chat"])
def test_a_424_is_an_error_with_the_models_message(sdk: openai.OpenAI, mock: MockLmi, model: str) -> None:
    marker = tag()
    with pytest.raises(openai.APIStatusError) as raised:
        sdk.chat.completions.create(model=model, messages=kit.user(f"[lmi-424] {marker}"))
    assert raised.value.status_code == 502, raised.value
    error = kit.error_envelope(raised.value.response)
    assert REJECTED_MESSAGE in error["message"], error
    # Not retried: max_retries = 0, and a 424 is the model's answer.
    assert len(mock.requests_with(marker)) == 1


@pytest.mark.parametrize("model", ["lmi-rolling", "lmi-tgi", "sm-rolling"])
def test_an_error_finish_is_an_error_not_an_empty_answer(sdk: openai.OpenAI, model: str) -> None:
    with pytest.raises(openai.APIStatusError) as raised:
        sdk.chat.completions.create(model=model, messages=kit.user(f"[lmi-error-finish] {tag()}"))
    assert raised.value.status_code >= 500, raised.value
    kit.error_envelope(raised.value.response)


@pytest.mark.parametrize(
    ("model", "marker"),
    [
        pytest.param("lmi-rolling", "[lmi-error-finish]", id="lmi-error-token"),
        pytest.param("lmi-tgi", "[lmi-error-finish]", id="lmi-tgi-error-token"),
        pytest.param("lmi-chat", "[lmi-stream-error]", id="lmi-body-breaks-off"),
        pytest.param("sm-rolling", "[lmi-error-finish]", id="sagemaker-error-token"),
        pytest.param("sm-rolling", "[lmi-stream-error]", id="sagemaker-model-stream-error"),
        pytest.param("sm-chat", "[lmi-stream-error]", id="sagemaker-chat-model-stream-error"),
    ],
)
def test_a_mid_stream_error_ends_the_stream_with_an_error(sdk: openai.OpenAI, model: str, marker: str) -> None:
    stream = sdk.chat.completions.create(model=model, messages=kit.user(f"{marker} {tag()}"), stream=True)
    received: list[str] = []
    with pytest.raises(openai.APIError):
        for chunk in stream:
            received.extend(c.delta.content or "" for c in chunk.choices)
    # Whatever came before the error is a strict beginning of the answer (the mock's payload parts are
    # cut at points seeded by the request, so one part may carry more than one token line).
    text = "".join(received)
    assert ANSWER.startswith(text) and text != ANSWER, received


def test_fallback_past_a_failing_lmi_provider(sdk: openai.OpenAI, mock: MockLmi) -> None:
    marker = tag()
    # The first request carrying the marker's key fails with a 503; the next provider gets the second.
    completion = sdk.chat.completions.create(model="lmi-fallback", messages=kit.user(f"[lmi-fail-times:1:{marker}]"))
    assert completion.choices[0].message.content == ANSWER
    assert [r["path"] for r in mock.requests_with(marker)] == ["/invocations", "/rolling_batch/invocations"]

    marker = tag()
    completion = sdk.chat.completions.create(model="lmi-unreachable", messages=kit.user(marker))
    assert completion.choices[0].message.content == ANSWER
    assert [r["path"] for r in mock.requests_with(marker)] == ["/invocations"]


def test_an_exhausted_fallback_reports_the_last_failure(sdk: openai.OpenAI, mock: MockLmi) -> None:
    marker = tag()
    with pytest.raises(openai.APIStatusError) as raised:
        sdk.chat.completions.create(model="lmi-fallback", messages=kit.user(f"[lmi-fail-times:5:{marker}]"))
    assert raised.value.status_code == 502
    assert "model not ready" in kit.error_envelope(raised.value.response)["message"]
    assert len(mock.requests_with(marker)) == 2


# --------------------------------------------------------------------------------------------
# Embeddings
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["lmi-embedding", "sm-embedding"])
def test_embeddings_on_the_embedding_schema(sdk: openai.OpenAI, mock: MockLmi, model: str) -> None:
    marker = tag()
    inputs = [f"first {marker}", f"second {marker}"]
    result = sdk.embeddings.create(model=model, input=inputs)
    vectors = [item.embedding for item in sorted(result.data, key=lambda item: item.index)]
    assert len(vectors) == 2 and all(len(v) == lmi_kit.EMBEDDING_DIMENSIONS for v in vectors)
    sent = mock.requests_with(marker)
    assert len(sent) == 1 and sent[0]["body"]["inputs"] == inputs, sent
    direct = mock.direct("/embedding/invocations", {"inputs": inputs}).json()
    # The SDK asks for base64 (float32) by default: equal to float32 precision.
    assert len(direct) == 2
    for got, want in zip(vectors, direct):
        assert got == pytest.approx(want, abs=1e-6)
    assert vectors[0] != vectors[1]


# --------------------------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------------------------


def test_a_batch_over_lmi_models(sdk: openai.OpenAI, mock: MockLmi) -> None:
    marker = tag()
    lines = [
        kit.chat_line("rolling-1", f"one {marker}", model="lmi-rolling"),
        kit.chat_line("rolling-2", f"two {marker}", model="lmi-rolling", max_tokens=2),
        kit.chat_line("sagemaker-chat", f"three {marker}", model="sm-chat"),
        kit.chat_line("rejected", f"[lmi-424] four {marker}", model="lmi-tgi"),
    ]
    batch = sdk.batches.create(
        input_file_id=kit.upload_batch_input(sdk, lines).id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    batch = kit.wait_for_batch(sdk, batch.id, timeout=60)
    assert batch.status == "completed", batch
    assert batch.request_counts is not None
    assert batch.request_counts.model_dump() == {"total": 4, "completed": 3, "failed": 1}
    output, errors = kit.batch_results(sdk, batch)
    answers = {line["custom_id"]: line["response"]["body"] for line in output}
    assert {cid: body["choices"][0]["message"]["content"] for cid, body in answers.items()} == {
        "rolling-1": ANSWER,
        "rolling-2": "Hello from",
        "sagemaker-chat": ANSWER,
    }
    assert answers["rolling-2"]["choices"][0]["finish_reason"] == "length"
    assert all(body["usage"]["completion_tokens"] in (2, 3) for body in answers.values()), answers
    assert [line["custom_id"] for line in errors] == ["rejected"]
    assert REJECTED_MESSAGE in errors[0]["response"]["body"]["error"]["message"], errors
    assert len(mock.requests_with(marker)) == 4
