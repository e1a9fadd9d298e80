//! The provider-neutral model request and response. Every entry point (the OpenAI routes, batch
//! lines, later `/inference` and async requests) translates its wire request into a
//! [`ModelRequest`]; every provider translates out of it into its own wire format, and back into a
//! [`ModelResponse`] or [`ModelChunk`]s. No provider sees another API's wire types.

mod accumulate;
mod content;
mod extra;
mod request;
mod response;

pub(crate) use accumulate::ChunkAccumulator;
pub(crate) use content::FileData;
pub use content::{ContentBlock, Message, Role};
pub(crate) use extra::{
    apply_extra_body, apply_extra_headers, entries_for, ExtraBodyEntry, ExtraBodyError, ExtraEdit, ExtraHeaderEntry,
    ExtraHeaderError, ExtraPlacement,
};
pub use request::ModelRequest;
pub(crate) use request::{
    OpenAiPassThrough, OutputMode, RetryScope, SamplingParams, StreamOptions, ToolChoice, ToolDefinition,
};
pub(crate) use response::{ChunkBlock, ChunkChoice, FinishReason, ModelChunk};
pub use response::{ModelChoice, ModelResponse, ModelUsage};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The request serializes and parses back unchanged (cache keys and records will rely on it).
    #[test]
    fn a_full_request_survives_json() {
        let request = ModelRequest {
            model: "m".into(),
            system: Some("be brief".into()),
            system_is_developer: true,
            messages: vec![
                Message::new(
                    Role::User,
                    vec![
                        ContentBlock::text_block("look"),
                        ContentBlock::File {
                            data: FileData::Base64 { data: "iVBO".into() },
                            mime_type: Some("image/png".into()),
                            filename: None,
                            detail: None,
                        },
                        ContentBlock::Unknown { data: json!({"x": 1}) },
                    ],
                ),
                Message::new(
                    Role::Assistant,
                    vec![
                        ContentBlock::Thought {
                            text: "hmm".into(),
                            signature: Some("sig".into()),
                        },
                        ContentBlock::ToolCall {
                            id: "c".into(),
                            name: "f".into(),
                            arguments: "{".into(),
                        },
                    ],
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
            tools: vec![ToolDefinition {
                name: "f".into(),
                description: None,
                parameters: Some(json!({"type": "object"})),
                strict: Some(true),
            }],
            tool_choice: Some(ToolChoice::Specific("f".into())),
            allowed_tools: Some(vec!["f".into()]),
            parallel_tool_calls: Some(true),
            output: OutputMode::JsonSchema {
                name: "s".into(),
                description: None,
                schema: Some(json!({"type": "object"})),
                strict: Some(true),
            },
            params: SamplingParams {
                temperature: Some(0.2),
                stop_sequences: vec!["\n".into()],
                n: Some(2),
                ..SamplingParams::default()
            },
            stream: Some(StreamOptions {
                include_usage: true,
                ..StreamOptions::default()
            }),
            extra_body: vec![
                ExtraBodyEntry::set("/a", json!(1)),
                ExtraBodyEntry::delete("/b")
                    .for_provider("p")
                    .placed(ExtraPlacement::BeforeProviderConfig),
            ],
            extra_headers: vec![
                ExtraHeaderEntry::delete("x-a"),
                ExtraHeaderEntry::set("x-b", "1").for_provider("p"),
            ],
            openai_pass_through: OpenAiPassThrough {
                fields: [("top_k".to_owned(), json!(5))].into_iter().collect(),
                max_completion_tokens_spelling: true,
            },
            raw_prompt: true,
            retries: RetryScope::Gateway,
        };
        let text = serde_json::to_string(&request).unwrap();
        assert_eq!(serde_json::from_str::<ModelRequest>(&text).unwrap(), request);
    }
}
