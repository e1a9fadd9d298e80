use super::*;
use serde_json::{json, Value};

const IDENTITY: AnswerIdentity<'static> = AnswerIdentity {
    id: "chatcmpl-1",
    created: 7,
    model: "m",
};

fn completion(value: Value) -> ChatCompletion {
    serde_json::from_value(value).unwrap()
}

#[test]
fn completions_round_trip_through_the_neutral_response() {
    let wire = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 7, "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi", "refusal": null},
             "logprobs": {"content": []}, "finish_reason": "stop"},
            {"index": 1, "message": {"role": "assistant", "content": null, "refusal": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
             "logprobs": null, "finish_reason": "tool_calls"},
            {"index": 2, "message": {"role": "assistant", "content": null, "refusal": "no"},
             "logprobs": null, "finish_reason": "content_filter"},
            {"index": 3, "message": {"role": "assistant", "content": "cut", "refusal": null},
             "logprobs": null, "finish_reason": "length"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7,
                  "prompt_tokens_details": {"cached_tokens": 1}},
        "system_fingerprint": "fp"
    });
    let model = completion_to_model(completion(wire.clone()), Some("raw".into()));
    assert_eq!(model.choices[1].finish_reason, Some(FinishReason::ToolCall));
    assert_eq!(
        model.choices[2].content,
        vec![ContentBlock::Refusal { text: "no".into() }]
    );
    assert_eq!(model.usage.input_details, Some(json!({"cached_tokens": 1})));
    assert_eq!(model.raw_response.as_deref(), Some("raw"));
    let back = serde_json::to_value(model_to_completion(model, IDENTITY)).unwrap();
    assert_eq!(back, wire);
}

#[test]
fn finish_reasons_map_to_openai_values() {
    assert_eq!(finish_reason_to_wire(FinishReason::StopSequence), "stop");
    assert_eq!(finish_reason_to_wire(FinishReason::Unknown), "stop");
    assert_eq!(finish_reason_to_model("function_call"), FinishReason::ToolCall);
    assert_eq!(finish_reason_to_model("eos_token"), FinishReason::Unknown);
}

#[test]
fn thoughts_and_unknown_blocks_have_no_openai_field() {
    let model = ModelResponse {
        id: "x".into(),
        choices: vec![ModelChoice {
            index: 0,
            content: vec![
                ContentBlock::Thought {
                    text: "hmm".into(),
                    signature: None,
                },
                ContentBlock::Text { text: "a".into() },
                ContentBlock::Unknown { data: json!(1) },
                ContentBlock::Text { text: "b".into() },
            ],
            finish_reason: Some(FinishReason::StopSequence),
            logprobs: None,
        }],
        usage: ModelUsage::new(1, 2),
        system_fingerprint: None,
        raw_response: None,
        raw_request: None,
        provider_name: String::new(),
        provider_type: String::new(),
    };
    let wire = model_to_completion(model, IDENTITY);
    assert_eq!(wire.choices[0].message.content.as_deref(), Some("ab"));
    assert_eq!(wire.choices[0].finish_reason.as_deref(), Some("stop"));
    assert_eq!(wire.usage.total_tokens, 3);
}

#[test]
fn chunks_round_trip_through_the_neutral_chunk() {
    let chunks = [
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m",
               "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null,
                            "finish_reason": null}]}),
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m",
               "choices": [{"index": 1, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                            "function": {"name": "f", "arguments": ""}}]}, "logprobs": null, "finish_reason": null}]}),
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m",
               "choices": [{"index": 1, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
                            "logprobs": null, "finish_reason": null}]}),
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m",
               "choices": [{"index": 0, "delta": {"refusal": "no"}, "logprobs": null, "finish_reason": "stop"}],
               "system_fingerprint": "fp"}),
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m", "choices": [],
               "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}),
    ];
    for wire in chunks {
        let chunk: ChatCompletionChunk = serde_json::from_value(wire.clone()).unwrap();
        let model = chunk_to_model(chunk, None);
        let back = serde_json::to_value(model_to_chunk(model, IDENTITY)).unwrap();
        assert_eq!(back, wire);
    }
}

#[test]
fn reasoning_content_becomes_thoughts() {
    let answer = completion_to_model(
        completion(json!({
            "id": "c", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "4", "reasoning_content": "2 and 2"}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        })),
        None,
    );
    assert_eq!(
        answer.choices[0].content,
        vec![
            ContentBlock::Thought {
                text: "2 and 2".into(),
                signature: None
            },
            ContentBlock::Text { text: "4".into() }
        ]
    );
    let chunk: ChatCompletionChunk = serde_json::from_value(json!({
        "id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}, "finish_reason": null}]
    }))
    .unwrap();
    let chunk = chunk_to_model(chunk, None);
    assert_eq!(
        chunk.choices[0].content,
        vec![ChunkBlock::Thought { text: "hmm".into() }]
    );
}
