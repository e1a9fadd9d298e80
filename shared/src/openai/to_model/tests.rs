use super::*;
use crate::model::ExtraBodyEntry;
use crate::openai::chat_body::model_to_chat_body;
use serde_json::json;

fn parse(body: Value) -> (ChatCompletionRequest, Map<String, Value>) {
    let typed = serde_json::from_value(body.clone()).unwrap();
    let Value::Object(raw) = body else { unreachable!() };
    (typed, raw)
}

fn to_model(body: Value) -> ModelRequest {
    let (typed, raw) = parse(body);
    chat_request_to_model(&typed, &raw)
}

/// Wire → model → wire → model gives the same model.
fn assert_model_round_trip(model: &ModelRequest) {
    let body = Value::Object(model_to_chat_body(model, &model.model));
    let again = to_model(body);
    assert_eq!(&again, model);
}

fn every_block_conversation() -> Value {
    json!({
        "model": "m",
        "messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "name": "ann", "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "https://x.test/cat.png", "detail": "low"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"}},
                {"type": "file", "file": {"file_id": "file-1"}}
            ]},
            {"role": "assistant", "content": "calling", "refusal": "partly not", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "system", "content": "now answer"},
            {"role": "user", "content": "thanks"}
        ]
    })
}

#[test]
fn every_content_block_comes_in() {
    let model = to_model(every_block_conversation());
    assert_eq!(model.system.as_deref(), Some("be brief"));
    assert!(model.system_is_developer);
    let user = &model.messages[0];
    assert_eq!((user.role, user.name.as_deref()), (Role::User, Some("ann")));
    assert_eq!(user.content[0], ContentBlock::text_block("look"));
    assert_eq!(
        user.content[1],
        ContentBlock::File {
            data: FileData::Url {
                url: "https://x.test/cat.png".into()
            },
            mime_type: None,
            filename: None,
            detail: Some("low".into()),
        }
    );
    assert!(
        matches!(&user.content[2], ContentBlock::File { data: FileData::Base64 { data }, mime_type: Some(m), .. }
        if data == "iVBO" && m == "image/png")
    );
    assert!(matches!(&user.content[3], ContentBlock::File { mime_type: Some(m), .. } if m == "audio/wav"));
    assert!(
        matches!(&user.content[4], ContentBlock::File { filename: Some(f), mime_type: Some(m), .. }
        if f == "a.pdf" && m == "application/pdf")
    );
    assert!(
        matches!(&user.content[5], ContentBlock::File { data: FileData::ProviderFileId { id }, .. } if id == "file-1")
    );
    let assistant = &model.messages[1];
    assert_eq!(
        assistant.content,
        vec![
            ContentBlock::text_block("calling"),
            ContentBlock::Refusal {
                text: "partly not".into()
            },
            ContentBlock::ToolCall {
                id: "call_1".into(),
                name: "get_weather".into(),
                arguments: "{\"city\":\"Oslo\"}".into()
            },
        ]
    );
    assert_eq!(
        model.messages[2].content,
        vec![ContentBlock::ToolResult {
            id: "call_1".into(),
            name: "get_weather".into(),
            result: "sunny".into()
        }]
    );
    assert_eq!(model.messages[3].role, Role::System);
    assert_eq!(model.messages.len(), 5);
}

#[test]
fn every_content_block_goes_out_as_the_client_sent_it() {
    let sent = every_block_conversation();
    let body = model_to_chat_body(&to_model(sent.clone()), "upstream");
    assert_eq!(body["model"], "upstream");
    let mut expected = sent["messages"].clone();
    // A lone text part is sent as a string; everything else is as the client wrote it.
    expected[1]["content"][0] = json!({"type": "text", "text": "look"});
    assert_eq!(body["messages"], expected);
    assert_model_round_trip(&to_model(sent));
}

#[test]
fn unknown_parts_pass_through() {
    let model = to_model(json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"detail": "high"}}]}]}));
    assert!(matches!(model.messages[0].content[0], ContentBlock::Unknown { .. }));
    let body = model_to_chat_body(&model, "u");
    assert_eq!(
        body["messages"][0]["content"][0],
        json!({"type": "image_url", "image_url": {"detail": "high"}})
    );
}

#[test]
fn tools_tool_choice_and_parallel_calls_round_trip() {
    for choice in [
        json!("none"),
        json!("auto"),
        json!("required"),
        json!({"type": "function", "function": {"name": "f"}}),
    ] {
        let sent = json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "f", "description": "does f",
                "parameters": {"type": "object"}, "strict": true}}],
            "tool_choice": choice, "parallel_tool_calls": false});
        let model = to_model(sent.clone());
        assert_eq!(model.tools[0].name, "f");
        assert_eq!(model.tools[0].strict, Some(true));
        assert_eq!(model.parallel_tool_calls, Some(false));
        let body = model_to_chat_body(&model, "m");
        for key in ["tools", "tool_choice", "parallel_tool_calls"] {
            assert_eq!(body[key], sent[key], "{key}");
        }
        assert_model_round_trip(&model);
    }
}

#[test]
fn json_modes_round_trip() {
    let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
    let cases = [
        (json!({"type": "json_object"}), OutputMode::JsonObject),
        (
            json!({"type": "json_schema", "json_schema": {"name": "w", "description": "d", "schema": schema, "strict": true}}),
            OutputMode::JsonSchema {
                name: "w".into(),
                description: Some("d".into()),
                schema: Some(schema.clone()),
                strict: Some(true),
            },
        ),
    ];
    for (format, mode) in cases {
        let sent = json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format": format});
        let model = to_model(sent.clone());
        assert_eq!(model.output, mode);
        assert_eq!(model_to_chat_body(&model, "m")["response_format"], format);
    }
    let text = to_model(json!({"model": "m", "messages": [], "response_format": {"type": "text"}}));
    assert_eq!(text.output, OutputMode::Text);
    assert!(!model_to_chat_body(&text, "m").contains_key("response_format"));
}

#[test]
fn params_come_in_and_go_out_with_the_clients_spelling() {
    let sent = json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
        "temperature": 0.5, "top_p": 0.9, "max_completion_tokens": 7, "presence_penalty": 0.1,
        "frequency_penalty": 0.2, "seed": 3, "stop": ["a", "b"], "n": 2, "logprobs": true,
        "top_logprobs": 4, "logit_bias": {"50256": -100.0}, "user": "u-1"});
    let model = to_model(sent.clone());
    assert_eq!(model.params.max_tokens, Some(7));
    assert_eq!(model.params.stop_sequences, vec!["a", "b"]);
    assert_eq!(model.params.n, Some(2));
    assert_eq!(model.params.user.as_deref(), Some("u-1"));
    assert!(model.openai_pass_through.fields.is_empty());
    let body = Value::Object(model_to_chat_body(&model, "m"));
    let Value::Object(mut expected) = sent else {
        unreachable!()
    };
    expected.insert("messages".into(), json!([{"role": "user", "content": "x"}]));
    assert_eq!(body, Value::Object(expected));
    assert_model_round_trip(&model);

    let old = model_to_chat_body(
        &to_model(json!({"model": "m", "messages": [], "max_tokens": 3, "stop": "z"})),
        "m",
    );
    assert_eq!((old["max_tokens"].clone(), old["stop"].clone()), (json!(3), json!("z")));
    assert!(!old.contains_key("max_completion_tokens"));
}

#[test]
fn unmodelled_parameters_pass_through_and_gateway_fields_do_not() {
    let sent = json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
        "store": true, "metadata": {"k": "v"}, "reasoning_effort": "low", "top_k": 5,
        "chat_template_kwargs": {"enable_thinking": false}, "stream": true,
        "stream_options": {"include_usage": true}});
    let model = to_model(sent);
    let fields = &model.openai_pass_through.fields;
    let mut keys: Vec<&str> = fields.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        vec!["chat_template_kwargs", "metadata", "reasoning_effort", "store", "top_k"]
    );
    assert_eq!(
        model.stream,
        Some(StreamOptions {
            include_usage: true,
            ..StreamOptions::default()
        })
    );
    let body = model_to_chat_body(&model, "m");
    assert_eq!(body["top_k"], 5);
    assert_eq!(body["chat_template_kwargs"], json!({"enable_thinking": false}));
    assert!(!body.contains_key("stream") && !body.contains_key("stream_options"));
}

#[test]
fn neutral_requests_survive_the_openai_wire() {
    let model = ModelRequest {
        model: "m".into(),
        system: Some("sys".into()),
        messages: vec![
            Message::new(
                Role::User,
                vec![ContentBlock::text_block("a"), ContentBlock::text_block("b")],
            ),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolCall {
                    id: "c".into(),
                    name: "f".into(),
                    arguments: "{}".into(),
                }],
            ),
            Message::new(
                Role::User,
                vec![ContentBlock::ToolResult {
                    id: "c".into(),
                    name: "f".into(),
                    result: "ok".into(),
                }],
            ),
        ],
        tool_choice: Some(ToolChoice::Specific("f".into())),
        params: SamplingParams {
            temperature: Some(0.0),
            ..SamplingParams::default()
        },
        extra_body: vec![ExtraBodyEntry::delete("/x")],
        ..ModelRequest::default()
    };
    let body = Value::Object(model_to_chat_body(&model, "m"));
    let mut again = to_model(body);
    // extra_body is applied by the provider, not carried on the wire.
    again.extra_body.clone_from(&model.extra_body);
    assert_eq!(again, model);
}
