//! Streamed answers as LMI's lines (JSON objects; the HTTP layer frames them).
//!
//! - Rolling batch: one `{"token": {"id", "text", "log_prob"}}` per piece of text the provider
//!   streams; the last line also carries `generated_text`, and `details` (`finish_reason`,
//!   `generated_tokens`, `inputs`) when they were asked (`parameters.details`) or in TGI-compatible
//!   mode. Token ids are positions in the answer (the gateway does not see
//!   the tokenizer) and `log_prob` is 0.0 (unknown; a number, so that typed clients still parse
//!   it). One line is held back until the next arrives, so that the last one can carry the summary.
//! - Dynamic batch: `{"outputs": [piece per prompt]}`, `""` for a prompt that has finished.
//! - Chat: `chat.completion.chunk` objects.
//!
//! A failure mid-stream ends the stream with LMI's error line (`finish_reason: "error"`; for
//! chat, OpenAI's error object).

use super::render::to_json;
use crate::inference::ClientChunkStream;
use crate::model::{ChunkBlock, FinishReason, ModelChunk};
use crate::openai::error::ApiError;
use crate::providers::lmi::finish_reason_to_lmi;
use crate::providers::{ChunkStream, ProviderError};
use futures::stream::BoxStream;
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::VecDeque;

/// LMI's line for a failure during generation, with the failure's message under `error`.
pub(crate) fn error_line(error: &ProviderError) -> Value {
    tracing::warn!(error = %error, "LMI stream failed mid-way");
    json!({
        "token": {"id": -1, "text": "", "log_prob": -1, "special_token": true},
        "generated_text": "",
        "details": {"finish_reason": "error", "generated_tokens": null, "inputs": null},
        "error": error.to_string(),
    })
}

/// The text in choice 0 of a chunk, its finish reason, and the chunk's output token count.
fn read_chunk(chunk: &ModelChunk) -> (String, Option<FinishReason>, Option<u64>) {
    let mut text = String::new();
    let mut finish = None;
    for choice in chunk.choices.iter().filter(|c| c.index == 0) {
        for block in &choice.content {
            if let ChunkBlock::Text { text: piece } = block {
                text.push_str(piece);
            }
        }
        finish = finish.or(choice.finish_reason);
    }
    (text, finish, chunk.usage.as_ref().map(|u| u.output_tokens))
}

/// What the last line of a rolling-batch stream carries besides its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct LastLine {
    /// `generated_text` starts with the prompt.
    pub return_full_text: bool,
    /// `details` is added.
    pub details: bool,
}

struct TokenLines {
    upstream: ChunkStream,
    prompt: String,
    last_line: LastLine,
    /// The last token line, sent when the next one (or the end) comes.
    held: Option<Value>,
    out: VecDeque<Value>,
    generated: String,
    tokens: u64,
    finish: Option<FinishReason>,
    output_tokens: Option<u64>,
    ended: bool,
}

impl TokenLines {
    /// Read upstream until there is a line to send; `false` when nothing is left.
    async fn fill(&mut self) -> bool {
        while self.out.is_empty() && !self.ended {
            match self.upstream.next().await {
                Some(Ok(chunk)) => {
                    let (text, finish, output_tokens) = read_chunk(&chunk);
                    self.finish = finish.or(self.finish);
                    self.output_tokens = output_tokens.or(self.output_tokens);
                    if !text.is_empty() {
                        let line = json!({"token": {"id": self.tokens, "text": text, "log_prob": 0.0}});
                        self.generated.push_str(&text);
                        self.tokens += 1;
                        if let Some(previous) = self.held.replace(line) {
                            self.out.push_back(previous);
                        }
                    }
                }
                Some(Err(error)) => {
                    self.out.extend(self.held.take());
                    self.out.push_back(error_line(&error));
                    self.ended = true;
                }
                None => {
                    let mut last = self
                        .held
                        .take()
                        .unwrap_or_else(|| json!({"token": {"id": self.tokens, "text": "", "log_prob": 0.0}}));
                    let generated = if self.last_line.return_full_text {
                        format!("{}{}", self.prompt, self.generated)
                    } else {
                        std::mem::take(&mut self.generated)
                    };
                    last["generated_text"] = json!(generated);
                    if self.last_line.details {
                        last["details"] = json!({
                            "finish_reason": finish_reason_to_lmi(self.finish),
                            "generated_tokens": self.output_tokens.unwrap_or(self.tokens),
                            "inputs": self.prompt,
                        });
                    }
                    self.out.push_back(last);
                    self.ended = true;
                }
            }
        }
        !self.out.is_empty()
    }
}

/// A rolling-batch stream's token lines.
pub(crate) fn token_lines(upstream: ChunkStream, prompt: String, last_line: LastLine) -> BoxStream<'static, Value> {
    let state = TokenLines {
        upstream,
        prompt,
        last_line,
        held: None,
        out: VecDeque::new(),
        generated: String::new(),
        tokens: 0,
        finish: None,
        output_tokens: None,
        ended: false,
    };
    futures::stream::unfold(state, |mut state| async move {
        if state.fill().await {
            let line = state.out.pop_front()?;
            Some((line, state))
        } else {
            None
        }
    })
    .boxed()
}

/// The next piece of text of one prompt's stream: `None` once it has ended (it is then dropped).
async fn next_piece(slot: &mut Option<ChunkStream>) -> Option<Result<String, ProviderError>> {
    let stream = slot.as_mut()?;
    loop {
        match stream.next().await {
            Some(Ok(chunk)) => {
                let (text, _, _) = read_chunk(&chunk);
                if !text.is_empty() {
                    return Some(Ok(text));
                }
            }
            Some(Err(error)) => {
                *slot = None;
                return Some(Err(error));
            }
            None => {
                *slot = None;
                return None;
            }
        }
    }
}

/// A dynamic batch's `{"outputs": [...]}` lines: each line has the next piece of every prompt
/// (in input order), until every prompt has finished.
pub(crate) fn outputs_lines(streams: Vec<ChunkStream>) -> BoxStream<'static, Value> {
    let slots: Vec<Option<ChunkStream>> = streams.into_iter().map(Some).collect();
    futures::stream::unfold(Some(slots), |slots| async move {
        let mut slots = slots?;
        let pieces = futures::future::join_all(slots.iter_mut().map(next_piece)).await;
        if pieces.iter().all(Option::is_none) {
            return None;
        }
        if let Some(error) = pieces.iter().find_map(|p| p.as_ref().and_then(|r| r.as_ref().err())) {
            return Some((error_line(error), None));
        }
        let outputs: Vec<String> = pieces
            .into_iter()
            .map(|piece| piece.and_then(Result::ok).unwrap_or_default())
            .collect();
        Some((json!({"outputs": outputs}), Some(slots)))
    })
    .boxed()
}

/// LMI chat's stream: `chat.completion.chunk` objects; a failure (the provider's, or a chunk
/// that cannot be rendered) ends it with OpenAI's error object.
pub(crate) fn chat_lines(chunks: ClientChunkStream) -> BoxStream<'static, Value> {
    futures::stream::unfold(Some(chunks), |chunks| async move {
        let mut chunks = chunks?;
        match chunks.next().await? {
            Ok(chunk) => Some(match to_json(&chunk) {
                Ok(line) => (line, Some(chunks)),
                Err(error) => {
                    tracing::error!(error = %error, "LMI chat chunk could not be rendered");
                    (ApiError::internal(error.to_string()).envelope(), None)
                }
            }),
            Err(error) => {
                tracing::warn!(error = %error, "LMI chat stream failed mid-way");
                Some((ApiError::from(error).envelope(), None))
            }
        }
    })
    .boxed()
}
