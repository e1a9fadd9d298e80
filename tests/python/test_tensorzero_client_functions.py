"""The real `tensorzero` client (HTTP mode) against `nimbus serve`: chat and json functions with
their templates and schemas, `model_name`, variants per episode, pinning, fallback and dryrun.
Functions on the recording upstream (`*_relay`, `relay`) show exactly what reached the model."""

from __future__ import annotations

import uuid

import uuid_utils
from tensorzero import ChatInferenceResponse, FinishReason, JsonInferenceResponse, TensorZeroGateway

import tensorzero_kit as tzk
from mock_upstream import RecordingUpstream

# --------------------------------------------------------------------------------------------
# Chat functions: templates and schemas
# --------------------------------------------------------------------------------------------


def test_a_chat_function_renders_its_system_and_user_templates(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    topic = tzk.tag()
    response = tz.inference(function_name="draft_email_relay", input=tzk.email_input({"recipient": "Bob", "topic": topic}))
    assert isinstance(response, ChatInferenceResponse)
    assert response.variant_name == "formal"
    assert tzk.text_of(response) == "Hello from choice 0"
    assert response.finish_reason == FinishReason.STOP
    assert (response.usage.input_tokens, response.usage.output_tokens) == (4, 4)
    sent = tz_upstream.one_with_text(topic).body
    assert sent["model"] == "mock-model"
    assert sent["messages"] == [
        {"role": "system", "content": "You write short, formal business emails on behalf of Ada. Sign with their name."},
        {"role": "user", "content": f"Write an email to Bob about {topic}."},
    ]


def test_the_example_chat_function_answers_from_its_rendered_user_template(tz: TensorZeroGateway) -> None:
    response = tz.inference(function_name="draft_email", input=tzk.email_input(), variant_name="formal")
    assert isinstance(response, ChatInferenceResponse)
    assert [block.type for block in response.content] == ["text"]
    # The dummy quotes the last user message: the rendered template.
    assert tzk.text_of(response).endswith("to: Write an email to Bob about lunch.")
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert response.inference_id.version == 7 and response.episode_id.version == 7


def test_object_content_is_sent_as_the_role_template(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    topic = tzk.tag()
    # Object content (deprecated by the client, still sent: a `template` block named `user`).
    tz.inference(
        function_name="draft_email_relay",
        input={"system": tzk.EMAIL_SYSTEM, "messages": [{"role": "user", "content": {"recipient": "Eve", "topic": topic}}]},
    )
    assert tz_upstream.one_with_text(topic).body["messages"][1]["content"] == f"Write an email to Eve about {topic}."


def test_plain_text_reaches_a_function_without_schemas_unchanged(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    text = f"Just say hello ({tzk.tag()})"
    response = tz.inference(function_name="relay", input=tzk.says(text, system="Be brief."))
    assert response.variant_name == "upstream"
    sent = tz_upstream.one_with_text(text).body
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]
    plain = tz.inference(function_name="plain_chat", input=tzk.says("Hi there"))
    assert tzk.text_of(plain).endswith("to: Hi there")


def test_a_multi_turn_conversation_keeps_its_roles(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    marker = tzk.tag()
    tz.inference(
        function_name="relay",
        input={
            "messages": [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "an answer"},
                {"role": "user", "content": [{"type": "text", "text": marker}, {"type": "raw_text", "value": "raw"}]},
            ]
        },
    )
    messages = tz_upstream.one_with_text(marker).body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[0]["content"] == "first" and messages[1]["content"] == "an answer"
    assert [part["text"] for part in messages[2]["content"]] == [marker, "raw"]


def test_files_reach_the_model_as_image_and_file_parts(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    marker = tzk.tag()
    content = [
        {"type": "text", "text": marker},
        {"type": "file", "url": "https://example.com/cat.png"},
        {"type": "file", "mime_type": "image/png", "data": "iVBORw0KGgo="},
        {"type": "file", "mime_type": "application/pdf", "data": "JVBERi0=", "filename": "a.pdf"},
    ]
    tz.inference(function_name="relay", input={"messages": [{"role": "user", "content": content}]})
    parts = tz_upstream.one_with_text(marker).body["messages"][0]["content"]
    assert parts[1:] == [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}},
    ]


# --------------------------------------------------------------------------------------------
# Json functions
# --------------------------------------------------------------------------------------------


def test_a_json_function_parses_an_answer_that_matches_its_output_schema(tz: TensorZeroGateway) -> None:
    document = {"type": "template", "name": "document", "arguments": {"document": "Hi, I'm Bob (bob@example.com)"}}
    response = tz.inference(function_name="extract_contact", input={"messages": [{"role": "user", "content": [document]}]})
    assert isinstance(response, JsonInferenceResponse)
    assert response.variant_name == "strict"
    assert response.output.raw is not None
    assert response.output.parsed is not None
    assert set(response.output.parsed) == {"name", "email", "phone"}
    assert response.finish_reason == FinishReason.STOP


def test_a_json_function_sends_its_named_template_and_schema_upstream(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    text = f"Signed, Carol ({tzk.tag()})"
    document = {"type": "template", "name": "document", "arguments": {"document": text}}
    response = tz.inference(function_name="extract_contact_relay", input={"messages": [{"role": "user", "content": [document]}]})
    assert isinstance(response, JsonInferenceResponse)
    # The upstream answers prose: raw is kept, parsed is null.
    assert response.output.raw == "Hello from choice 0"
    assert response.output.parsed is None
    sent = tz_upstream.one_with_text(text).body
    assert sent["messages"] == [{"role": "user", "content": f"Document:\n{text}"}]
    # json_mode defaults to strict: the output schema goes along as a json_schema response format.
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["schema"]["required"] == ["name", "email", "phone"]


def test_a_dynamic_output_schema_replaces_the_configured_one(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    document = {"type": "template", "name": "document", "arguments": {"document": "From Oslo"}}
    response = tz.inference(
        function_name="extract_contact", input={"messages": [{"role": "user", "content": [document]}]}, output_schema=schema
    )
    assert isinstance(response, JsonInferenceResponse)
    assert set(response.output.parsed) == {"city"}
    marker = f"From Bergen {tzk.tag()}"
    document["arguments"] = {"document": marker}
    tz.inference(
        function_name="extract_contact_relay",
        input={"messages": [{"role": "user", "content": [document]}]},
        output_schema=schema,
    )
    assert tz_upstream.one_with_text(marker).body["response_format"]["json_schema"]["schema"] == schema


def test_json_mode_on_asks_for_a_json_object(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    marker = tzk.tag()
    response = tz.inference(function_name="json_relay", input=tzk.says(marker))
    assert isinstance(response, JsonInferenceResponse)
    assert response.output.raw == "Hello from choice 0" and response.output.parsed is None
    assert tz_upstream.one_with_text(marker).body["response_format"] == {"type": "json_object"}


# --------------------------------------------------------------------------------------------
# model_name
# --------------------------------------------------------------------------------------------


def test_model_name_runs_a_configured_model(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    response = tz.inference(model_name="dummy", input=tzk.says("Hello model"))
    assert isinstance(response, ChatInferenceResponse)
    assert response.variant_name == "dummy"
    assert tzk.text_of(response).endswith("to: Hello model")
    marker = tzk.tag()
    relayed = tz.inference(model_name="mock", input=tzk.says(marker, system="sys"))
    assert relayed.variant_name == "mock"
    sent = tz_upstream.one_with_text(marker).body
    assert sent["model"] == "mock-model"
    assert sent["messages"][0] == {"role": "system", "content": "sys"}


def test_model_name_falls_back_across_a_models_providers(tz: TensorZeroGateway) -> None:
    response = tz.inference(model_name="dummy-fallback", input=tzk.says("Hello"))
    assert tzk.text_of(response).endswith("to: Hello")


def test_model_name_takes_a_dummy_shorthand(tz: TensorZeroGateway) -> None:
    response = tz.inference(model_name="dummy::anything", input=tzk.says("Hello shorthand"))
    assert response.variant_name == "dummy::anything"
    assert tzk.text_of(response).endswith("to: Hello shorthand")


# --------------------------------------------------------------------------------------------
# Variants: episodes, pinning, fallback
# --------------------------------------------------------------------------------------------


def test_an_episode_keeps_its_variant(tz: TensorZeroGateway) -> None:
    first = tz.inference(function_name="draft_email", input=tzk.email_input())
    for _ in range(6):
        again = tz.inference(function_name="draft_email", input=tzk.email_input(), episode_id=first.episode_id)
        assert again.episode_id == first.episode_id
        assert again.variant_name == first.variant_name
        assert again.inference_id != first.inference_id


def test_new_episodes_draw_both_weighted_variants_and_never_the_fallback(tz: TensorZeroGateway) -> None:
    seen: dict[str, int] = {}
    for _ in range(40):
        # An episode id minted client-side (UUIDv7, now) is accepted like one the gateway made.
        response = tz.inference(function_name="draft_email", input=tzk.email_input(), episode_id=uuid_utils.uuid7())
        seen[response.variant_name] = seen.get(response.variant_name, 0) + 1
    # 0.7 / 0.3 weights: 40 draws miss one of them with probability below 1e-6.
    assert set(seen) == {"formal", "casual"}, seen


def test_a_pinned_variant_answers_even_if_it_is_only_a_fallback(tz: TensorZeroGateway) -> None:
    for variant in ("casual", "careful"):
        response = tz.inference(function_name="draft_email", input=tzk.email_input(), variant_name=variant)
        assert response.variant_name == variant


def test_a_failing_candidate_falls_back(tz: TensorZeroGateway) -> None:
    response = tz.inference(function_name="flaky_candidate", input=tzk.says("Hello"))
    assert response.variant_name == "steady"
    assert tzk.text_of(response).endswith("to: Hello")


def test_a_pinned_failing_variant_does_not_fall_back(tz: TensorZeroGateway) -> None:
    # TensorZero answers a pinned variant's model error itself: 500 when its providers failed.
    message = tzk.expect_error(500, tz.inference, function_name="flaky_candidate", input=tzk.says("x"), variant_name="broken")
    assert "broken" in message and "steady" not in message


def test_dryrun_answers_like_a_normal_inference(tz: TensorZeroGateway, tz_upstream: RecordingUpstream) -> None:
    marker = tzk.tag()
    response = tz.inference(function_name="relay", input=tzk.says(marker), dryrun=True)
    assert tzk.text_of(response) == "Hello from choice 0"
    # A dryrun still calls the model; it only stores nothing.
    assert len(tz_upstream.with_text(marker)) == 1


def test_tags_internal_and_the_clients_defaults_are_accepted(tz: TensorZeroGateway) -> None:
    response = tz.inference(
        function_name="plain_chat",
        input=tzk.says("Tagged"),
        tags={"user_id": "123", "team": "qa"},
        internal=True,
        params={"chat_completion": {"temperature": 0.1, "max_tokens": 50, "seed": 3}},
        cache_options={"enabled": "off", "max_age_s": None},
    )
    assert tzk.text_of(response).endswith("to: Tagged")
    assert isinstance(response.inference_id, uuid.UUID)
