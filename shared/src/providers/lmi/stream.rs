//! Streamed LMI answers: bytes split anywhere → lines → [`ModelChunk`]s.
//!
//! Lines are JSON, optionally `data:`-prefixed (SSE, TGI mode); blank lines, SSE comments and
//! `event:`/`id:`/`retry:` lines are skipped, `[DONE]` ends the stream. A JSON value written over
//! several lines is joined until it parses.

use super::protocol::{finish_reason_from_lmi, is_error_line, reported_error};
use super::response::{lmi_finish_reasons, model_reported_error, Details};
use crate::config::LmiSchema;
use crate::model::{ChunkBlock, ChunkChoice, FinishReason, ModelChunk, ModelUsage};
use crate::openai::chat::ChatCompletionChunk;
use crate::openai::from_model::chunk_to_model;
use crate::ports::lmi_transport::LmiByteStream;
use crate::providers::{ChunkStream, ProviderError};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::Value;
use std::collections::VecDeque;
use std::time::Duration;

/// The longest line (or JSON value written over several lines) kept while waiting for its end.
const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// Whole lines out of bytes that arrive split anywhere.
pub(crate) struct LineReader {
    bytes: LmiByteStream,
    buffer: Vec<u8>,
    /// Where the search for the next `\n` resumes.
    scanned: usize,
    ended: bool,
    idle_timeout: Duration,
}

impl LineReader {
    pub fn new(bytes: LmiByteStream, idle_timeout: Duration) -> Self {
        Self {
            bytes,
            buffer: Vec::new(),
            scanned: 0,
            ended: false,
            idle_timeout,
        }
    }

    /// The next line without its `\n` (and `\r`); the unterminated rest once the bytes end; `None`
    /// after that. No bytes for the idle timeout is a [`ProviderError::Timeout`].
    pub(crate) async fn next_line(&mut self) -> Result<Option<String>, ProviderError> {
        loop {
            if let Some(at) = self.buffer[self.scanned..].iter().position(|b| *b == b'\n') {
                let end = self.scanned + at;
                let mut line: Vec<u8> = self.buffer.drain(..=end).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                self.scanned = 0;
                return text(line).map(Some);
            }
            self.scanned = self.buffer.len();
            if self.ended {
                if self.buffer.is_empty() {
                    return Ok(None);
                }
                self.scanned = 0;
                return text(std::mem::take(&mut self.buffer)).map(Some);
            }
            if self.buffer.len() > MAX_LINE_BYTES {
                return Err(ProviderError::InvalidResponse(
                    "LMI stream: a line is too long".to_owned(),
                ));
            }
            match tokio::time::timeout(self.idle_timeout, self.bytes.next()).await {
                Err(_) => {
                    return Err(ProviderError::Timeout {
                        after: self.idle_timeout,
                    })
                }
                Ok(None) => self.ended = true,
                Ok(Some(Err(error))) => return Err(error),
                Ok(Some(Ok(bytes))) => self.buffer.extend_from_slice(&bytes),
            }
        }
    }
}

fn text(line: Vec<u8>) -> Result<String, ProviderError> {
    String::from_utf8(line).map_err(|_| ProviderError::InvalidResponse("LMI stream: a line is not UTF-8".to_owned()))
}

/// The JSON text a line carries, if any: `data:` stripped; blank lines, SSE comments and SSE
/// fields other than `data` skipped.
pub fn payload(line: &str) -> Option<&str> {
    let line = line.trim();
    if line.is_empty() || line.starts_with(':') {
        return None;
    }
    if let Some(data) = line.strip_prefix("data:") {
        let data = data.trim();
        return (!data.is_empty()).then_some(data);
    }
    let is_sse_field = ["event:", "id:", "retry:"].iter().any(|field| line.starts_with(field));
    (!is_sse_field).then_some(line)
}

/// One token line of the rolling-batch stream (the last one also has `generated_text`/`details`).
#[derive(Debug, Deserialize)]
struct TokenLine {
    #[serde(default)]
    token: Option<Token>,
    #[serde(default)]
    generated_text: Option<String>,
    #[serde(default)]
    details: Option<Details>,
}

#[derive(Debug, Deserialize)]
struct Token {
    #[serde(default)]
    text: String,
    /// TGI spells it `special`.
    #[serde(default, alias = "special")]
    special_token: bool,
}

/// Turns the payloads of one stream into chunks.
#[derive(Debug)]
pub(crate) struct ChunkMapper {
    schema: LmiSchema,
    /// A JSON value written over several lines, so far.
    partial: String,
    started: bool,
    tokens: u64,
    finished: bool,
}

impl ChunkMapper {
    pub fn new(schema: LmiSchema) -> Self {
        Self {
            schema,
            partial: String::new(),
            started: false,
            tokens: 0,
            finished: false,
        }
    }

    /// The stream said it is complete (`[DONE]` or its last line).
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// The chunks one line gives.
    pub(crate) fn on_line(&mut self, line: &str) -> Result<Vec<ModelChunk>, ProviderError> {
        let Some(data) = payload(line) else {
            return Ok(Vec::new());
        };
        if data == "[DONE]" {
            self.finished = true;
            return Ok(Vec::new());
        }
        let value: Value = if self.partial.is_empty() {
            match serde_json::from_str(data) {
                Ok(value) => value,
                Err(error) if error.is_eof() => {
                    self.partial.push_str(data);
                    return Ok(Vec::new());
                }
                Err(error) => return Err(not_json(&error)),
            }
        } else {
            self.partial.push('\n');
            self.partial.push_str(data);
            if self.partial.len() > MAX_LINE_BYTES {
                return Err(ProviderError::InvalidResponse(
                    "LMI stream: a value is too long".to_owned(),
                ));
            }
            match serde_json::from_str(&self.partial) {
                Ok(value) => {
                    self.partial.clear();
                    value
                }
                Err(error) if error.is_eof() => return Ok(Vec::new()),
                Err(error) => return Err(not_json(&error)),
            }
        };
        if let Some(error) = error_object(&value) {
            return Err(error);
        }
        match self.schema {
            LmiSchema::Chat => self.chat_chunk(value),
            LmiSchema::DynamicBatch if value.get("outputs").is_some() => Ok(self.outputs_chunk(&value)),
            _ => self.token_line(value),
        }
    }

    /// The chunks owed when the bytes end: the finish and usage, when no last line gave them.
    pub(crate) fn on_end(&mut self) -> Result<Vec<ModelChunk>, ProviderError> {
        if !self.partial.is_empty() {
            return Err(ProviderError::InvalidResponse(
                "LMI stream ended inside a JSON value".to_owned(),
            ));
        }
        if self.finished || self.schema == LmiSchema::Chat {
            return Ok(Vec::new());
        }
        // Only dynamic batch streams end without a last line; the others give it their finish.
        if self.schema != LmiSchema::DynamicBatch {
            return Err(ProviderError::Connection(
                "LMI stream ended before its last line (generated_text / details)".to_owned(),
            ));
        }
        self.finished = true;
        Ok(self.finish(None, FinishReason::Stop, ModelUsage::new(0, self.tokens)))
    }

    fn text_chunk(&mut self, text: String) -> ModelChunk {
        self.choice_chunk(vec![ChunkBlock::Text { text }])
    }

    /// A chunk of the one choice with `content`; the first one starts the message.
    fn choice_chunk(&mut self, content: Vec<ChunkBlock>) -> ModelChunk {
        let starts_message = !self.started;
        self.started = true;
        ModelChunk {
            choices: vec![ChunkChoice {
                index: 0,
                starts_message,
                content,
                ..ChunkChoice::default()
            }],
            ..ModelChunk::default()
        }
    }

    /// The last piece with the finish reason, then the usage chunk.
    fn finish(&mut self, text: Option<String>, reason: FinishReason, usage: ModelUsage) -> Vec<ModelChunk> {
        let mut last = match text {
            Some(text) => self.text_chunk(text),
            None => self.choice_chunk(Vec::new()),
        };
        if let Some(choice) = last.choices.first_mut() {
            choice.finish_reason = Some(reason);
        }
        let usage = ModelChunk {
            usage: Some(usage),
            ..ModelChunk::default()
        };
        vec![last, usage]
    }

    fn outputs_chunk(&mut self, value: &Value) -> Vec<ModelChunk> {
        let text: String = value["outputs"]
            .as_array()
            .and_then(|outputs| outputs.first())
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        self.tokens += 1;
        vec![self.text_chunk(text)]
    }

    /// A rolling-batch / TGI token line; also the whole answer of a container that did not stream.
    fn token_line(&mut self, value: Value) -> Result<Vec<ModelChunk>, ProviderError> {
        let first = match &value {
            Value::Array(items) => items.first().cloned().unwrap_or(Value::Null),
            other => other.clone(),
        };
        let line: TokenLine = serde_json::from_value(first).map_err(|e| invalid_line(&e))?;
        if is_error_line(&value) {
            return Err(model_reported_error(Some(value)));
        }
        let piece = match line.token {
            Some(token) => {
                self.tokens += 1;
                (!token.special_token).then_some(token.text)
            }
            // No token: a whole answer, when nothing was streamed before it.
            None => line.generated_text.clone().filter(|_| !self.started),
        };
        if line.generated_text.is_none() && line.details.is_none() {
            return Ok(piece.map(|text| vec![self.text_chunk(text)]).unwrap_or_default());
        }
        self.finished = true;
        let details = line.details.unwrap_or_default();
        let reason = finish_reason_from_lmi(details.finish_reason.as_deref());
        let usage = details.usage(self.tokens);
        Ok(self.finish(piece, reason, usage))
    }

    /// A `chat.completion.chunk`; one finished with `error` is an error.
    fn chat_chunk(&mut self, value: Value) -> Result<Vec<ModelChunk>, ProviderError> {
        let failed = value["choices"]
            .as_array()
            .is_some_and(|choices| choices.iter().any(|c| c["finish_reason"] == "error"));
        if failed {
            return Err(model_reported_error(Some(value)));
        }
        let reasons = lmi_finish_reasons(&value);
        let chunk: ChatCompletionChunk = serde_json::from_value(value).map_err(|e| invalid_line(&e))?;
        let mut chunk = chunk_to_model(chunk, None);
        for choice in &mut chunk.choices {
            if let Some(reason) = reasons.get(&u64::from(choice.index)) {
                choice.finish_reason = Some(*reason);
            }
        }
        Ok(vec![chunk])
    }
}

fn not_json(error: &serde_json::Error) -> ProviderError {
    ProviderError::InvalidResponse(format!("LMI stream: a line is not JSON: {error}"))
}

fn invalid_line(error: &serde_json::Error) -> ProviderError {
    ProviderError::InvalidResponse(format!("LMI stream: unexpected line: {error}"))
}

/// An error object sent in the stream (`{"error": …, "code"?}`) as a provider error.
fn error_object(value: &Value) -> Option<ProviderError> {
    let reported = reported_error(value)?;
    Some(ProviderError::Http {
        status: reported.status,
        message: reported.message,
        retry_after: None,
        body: Some(value.clone()),
    })
}

/// Chunks from a streamed answer on `schema`; an `Err` item ends it.
pub(crate) fn chunk_stream(bytes: LmiByteStream, schema: LmiSchema, idle_timeout: Duration) -> ChunkStream {
    struct State {
        reader: LineReader,
        mapper: ChunkMapper,
        queue: VecDeque<ModelChunk>,
        done: bool,
    }
    let state = State {
        reader: LineReader::new(bytes, idle_timeout),
        mapper: ChunkMapper::new(schema),
        queue: VecDeque::new(),
        done: false,
    };
    futures::stream::unfold(state, move |mut state| async move {
        loop {
            if let Some(chunk) = state.queue.pop_front() {
                return Some((Ok(chunk), state));
            }
            if state.done {
                return None;
            }
            let chunks = match state.reader.next_line().await {
                Ok(Some(line)) => state.mapper.on_line(&line),
                Ok(None) => {
                    state.done = true;
                    state.mapper.on_end()
                }
                Err(error) => Err(error),
            };
            match chunks {
                Ok(chunks) => state.queue.extend(chunks),
                Err(error) => {
                    state.done = true;
                    return Some((Err(error), state));
                }
            }
            // `[DONE]` or the last line: what follows is not read.
            if state.mapper.finished() && schema == LmiSchema::Chat {
                state.done = true;
            }
        }
    })
    .boxed()
}
