//! A function's answer as an OpenAI completion (and its chunks): `model` names the function and
//! variant, `id` is the inference id, and `episode_id` rides along at the top level.

use crate::model::FinishReason;
use crate::tensorzero::function_calls::{
    ChunkBody, ContentChunk, FunctionOutput, InferenceChunk, InferenceResult, OutputBlock, DEFAULT_FUNCTION,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// `tensorzero::function_name::F::variant_name::V`, or `tensorzero::model_name::M` for the
/// passthrough function.
fn model_label(function_name: &str, variant_name: &str) -> String {
    if function_name == DEFAULT_FUNCTION {
        format!("tensorzero::model_name::{variant_name}")
    } else {
        format!("tensorzero::function_name::{function_name}::variant_name::{variant_name}")
    }
}

fn finish_reason(reason: Option<FinishReason>) -> Value {
    match reason {
        None => Value::Null,
        Some(FinishReason::ToolCall) => json!("tool_calls"),
        Some(FinishReason::Length) => json!("length"),
        Some(FinishReason::ContentFilter) => json!("content_filter"),
        Some(FinishReason::Stop | FinishReason::StopSequence | FinishReason::Unknown) => json!("stop"),
    }
}

fn usage(input_tokens: u64, output_tokens: u64) -> Value {
    json!({
        "prompt_tokens": input_tokens,
        "completion_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
    })
}

/// The completion for a finished inference; `created` in Unix seconds.
pub(crate) fn completion_of(result: &InferenceResult, created: i64) -> Value {
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    match &result.output {
        FunctionOutput::Chat(blocks) => {
            for block in blocks {
                match block {
                    OutputBlock::Text { text: piece } => text.push_str(piece),
                    OutputBlock::ToolCall {
                        id,
                        raw_name,
                        raw_arguments,
                        ..
                    } => tool_calls.push(json!({
                        "id": id, "type": "function",
                        "function": {"name": raw_name, "arguments": raw_arguments}
                    })),
                    OutputBlock::Thought { .. } | OutputBlock::Unknown { .. } => {}
                }
            }
        }
        FunctionOutput::Json(output) => text = output.raw.clone().unwrap_or_default(),
    }
    let mut message = json!({"role": "assistant", "content": if text.is_empty() && !tool_calls.is_empty() { Value::Null } else { json!(text) }});
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    json!({
        "id": result.inference_id,
        "episode_id": result.episode_id,
        "object": "chat.completion",
        "created": created,
        "model": model_label(&result.function_name, &result.variant_name),
        "system_fingerprint": "",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason(result.finish_reason)}],
        "usage": usage(result.usage.input_tokens, result.usage.output_tokens),
    })
}

/// Turns function chunks into OpenAI chunks (tool calls numbered in order of appearance).
#[derive(Debug)]
pub(crate) struct CompletionChunker {
    model: String,
    created: i64,
    include_usage: bool,
    started: bool,
    tool_indexes: BTreeMap<String, u32>,
}

impl CompletionChunker {
    pub fn new(function_name: &str, variant_name: &str, created: i64, include_usage: bool) -> Self {
        Self {
            model: model_label(function_name, variant_name),
            created,
            include_usage,
            started: false,
            tool_indexes: BTreeMap::new(),
        }
    }

    pub fn chunk(&mut self, chunk: &InferenceChunk) -> Option<Value> {
        let mut delta = serde_json::Map::new();
        if !self.started {
            self.started = true;
            delta.insert("role".into(), json!("assistant"));
        }
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        match &chunk.body {
            ChunkBody::Chat { content } => {
                for piece in content {
                    match piece {
                        ContentChunk::Text { text: t, .. } => text.push_str(t),
                        ContentChunk::ToolCall {
                            id,
                            raw_name,
                            raw_arguments,
                        } => {
                            let next = u32::try_from(self.tool_indexes.len()).unwrap_or(u32::MAX);
                            let known = self.tool_indexes.contains_key(id);
                            let index = *self.tool_indexes.entry(id.clone()).or_insert(next);
                            let mut function = json!({"arguments": raw_arguments});
                            if !raw_name.is_empty() {
                                function["name"] = json!(raw_name);
                            }
                            let mut call = json!({"index": index, "function": function});
                            if !known {
                                call["id"] = json!(id);
                                call["type"] = json!("function");
                            }
                            tool_calls.push(call);
                        }
                        ContentChunk::Thought { .. } => {}
                    }
                }
            }
            ChunkBody::Json { raw } => text.push_str(raw),
        }
        if !text.is_empty() {
            delta.insert("content".into(), json!(text));
        }
        if !tool_calls.is_empty() {
            delta.insert("tool_calls".into(), Value::Array(tool_calls));
        }
        let usage = chunk
            .usage
            .filter(|_| self.include_usage)
            .map(|u| usage(u.input_tokens, u.output_tokens));
        if delta.is_empty() && chunk.finish_reason.is_none() && usage.is_none() {
            return None;
        }
        let choices = if delta.is_empty() && chunk.finish_reason.is_none() {
            json!([])
        } else {
            json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason(chunk.finish_reason)}])
        };
        let mut out = json!({
            "id": chunk.inference_id,
            "episode_id": chunk.episode_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "",
            "choices": choices,
        });
        if let Some(usage) = usage {
            out["usage"] = usage;
        }
        Some(out)
    }
}
