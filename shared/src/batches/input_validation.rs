//! Validate a batch input file (JSONL) as a stream, never whole in memory, and plan its chunks as
//! byte ranges of the stored object (so queue messages stay small).
//!
//! Error codes follow OpenAI's: `invalid_json_line`, `missing_required_parameter`, `invalid_url`,
//! `streaming_unsupported`, `model_not_found`, `invalid_request`, `duplicate_custom_id`; plus
//! `empty_file` and `too_many_requests` for the cases OpenAI does not document. Lines are 1-based.

use crate::ports::{ByteStream, StorageError};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashSet;

/// At most this many requests per batch.
pub(crate) const MAX_REQUESTS: usize = 50_000;

/// The endpoints a batch may target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchEndpoint {
    ChatCompletions,
    Embeddings,
}

impl BatchEndpoint {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "/v1/chat/completions" => Some(Self::ChatCompletions),
            "/v1/embeddings" => Some(Self::Embeddings),
            _ => None,
        }
    }

    pub fn path(self) -> &'static str {
        match self {
            Self::ChatCompletions => "/v1/chat/completions",
            Self::Embeddings => "/v1/embeddings",
        }
    }

    /// The body field every request to this endpoint needs besides `model`.
    fn required_body_field(self) -> &'static str {
        match self {
            Self::ChatCompletions => "messages",
            Self::Embeddings => "input",
        }
    }
}

/// One problem with the input file, as listed in the Batch object's `errors.data`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LineError {
    pub code: &'static str,
    pub message: String,
    pub param: Option<String>,
    pub line: Option<u64>,
}

/// A contiguous run of request lines: bytes `start..end` of the input object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRange {
    pub first_line: u64,
    pub lines: u64,
    pub start: u64,
    pub end: u64,
}

/// What validation found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ValidationReport {
    pub total_requests: u64,
    pub errors: Vec<LineError>,
    pub chunks: Vec<ChunkRange>,
}

impl ValidationReport {
    pub fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Checks one line at a time and tracks what spans lines (custom ids, chunk boundaries).
struct Validator<'a> {
    endpoint: BatchEndpoint,
    model_exists: &'a (dyn Fn(&str) -> bool + Sync),
    lines_per_chunk: u64,
    max_chunk_bytes: u64,
    seen_ids: HashSet<String>,
    report: ValidationReport,
    line_number: u64,
}

impl Validator<'_> {
    fn error(&mut self, code: &'static str, message: String, param: Option<&str>) {
        self.report.errors.push(LineError {
            code,
            message,
            param: param.map(str::to_owned),
            line: Some(self.line_number),
        });
    }

    /// A complete line (without its newline) at bytes `start..end`.
    fn line(&mut self, text: &[u8], start: u64, end: u64) {
        self.line_number += 1;
        let trimmed = text.trim_ascii();
        if trimmed.is_empty() {
            return;
        }
        self.report.total_requests += 1;
        if self.report.total_requests > MAX_REQUESTS as u64 {
            return;
        }
        self.add_to_chunks(start, end);
        self.check(trimmed);
    }

    fn add_to_chunks(&mut self, start: u64, end: u64) {
        let line = self.line_number;
        match self.report.chunks.last_mut() {
            Some(chunk) if chunk.lines < self.lines_per_chunk && end - chunk.start <= self.max_chunk_bytes => {
                chunk.lines += 1;
                chunk.end = end;
            }
            _ => self.report.chunks.push(ChunkRange {
                first_line: line,
                lines: 1,
                start,
                end,
            }),
        }
    }

    fn check(&mut self, text: &[u8]) {
        let Ok(Value::Object(request)) = serde_json::from_slice::<Value>(text) else {
            self.error(
                "invalid_json_line",
                "This line is not parseable as valid JSON.".to_owned(),
                None,
            );
            return;
        };
        for field in ["custom_id", "method", "url", "body"] {
            if request.get(field).is_none_or(Value::is_null) {
                self.error(
                    "missing_required_parameter",
                    format!("Missing required parameter: '{field}'."),
                    Some(field),
                );
                return;
            }
        }
        let Some(custom_id) = request.get("custom_id").and_then(Value::as_str) else {
            self.error(
                "invalid_request",
                "'custom_id' must be a string.".to_owned(),
                Some("custom_id"),
            );
            return;
        };
        if !self.seen_ids.insert(custom_id.to_owned()) {
            self.error(
                "duplicate_custom_id",
                format!(
                    "The custom_id '{}' is used by an earlier line; every custom_id must be unique.",
                    crate::user_text::excerpt(custom_id)
                ),
                Some("custom_id"),
            );
            return;
        }
        if request.get("method").and_then(Value::as_str) != Some("POST") {
            self.error("invalid_request", "'method' must be 'POST'.".to_owned(), Some("method"));
            return;
        }
        let url = request.get("url").and_then(Value::as_str).unwrap_or_default();
        if url != self.endpoint.path() {
            self.error(
                "invalid_url",
                format!(
                    "The URL '{url}' does not match the batch endpoint '{}'.",
                    self.endpoint.path()
                ),
                Some("url"),
            );
            return;
        }
        let Some(body) = request.get("body").and_then(Value::as_object) else {
            self.error(
                "invalid_request",
                "'body' must be a JSON object.".to_owned(),
                Some("body"),
            );
            return;
        };
        if body.get("stream").and_then(Value::as_bool) == Some(true) {
            self.error(
                "streaming_unsupported",
                "Streaming is not supported in batches.".to_owned(),
                Some("body.stream"),
            );
            return;
        }
        let Some(model) = body.get("model").and_then(Value::as_str) else {
            self.error(
                "invalid_request",
                "Missing required parameter: 'body.model'.".to_owned(),
                Some("body.model"),
            );
            return;
        };
        let field = self.endpoint.required_body_field();
        if body.get(field).is_none_or(Value::is_null) {
            self.error(
                "invalid_request",
                format!("Missing required parameter: 'body.{field}'."),
                Some(&format!("body.{field}")),
            );
            return;
        }
        if !(self.model_exists)(model) {
            self.error(
                "model_not_found",
                format!(
                    "The model '{}' does not exist or you do not have access to it.",
                    crate::user_text::excerpt(model)
                ),
                Some("body.model"),
            );
        }
    }

    fn finish(mut self) -> ValidationReport {
        if self.report.total_requests == 0 {
            self.report.errors.push(LineError {
                code: "empty_file",
                message: "The input file has no requests.".to_owned(),
                param: Some("input_file_id".to_owned()),
                line: None,
            });
        } else if self.report.total_requests > MAX_REQUESTS as u64 {
            self.report.errors.push(LineError {
                code: "too_many_requests",
                message: format!(
                    "The input file has {} requests; a batch may have at most {MAX_REQUESTS}.",
                    self.report.total_requests
                ),
                param: Some("input_file_id".to_owned()),
                line: None,
            });
        }
        self.report
    }
}

/// How big a chunk may grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkLimits {
    pub lines: u64,
    /// A chunk ends before a line that would take it past this many bytes (a single longer line
    /// is a chunk of its own).
    pub bytes: u64,
}

/// Plan the chunks of lines checked already (a `/batch_inference` batch's items, checked when it
/// was submitted): every non-blank line is a request.
pub(crate) fn plan_checked_lines(bytes: &[u8], limits: ChunkLimits) -> ValidationReport {
    let mut validator = Validator {
        endpoint: BatchEndpoint::ChatCompletions,
        model_exists: &|_| true,
        lines_per_chunk: limits.lines.max(1),
        max_chunk_bytes: limits.bytes.max(1),
        seen_ids: HashSet::new(),
        report: ValidationReport::default(),
        line_number: 0,
    };
    let mut start = 0;
    for line in bytes.split_inclusive(|b| *b == b'\n') {
        let end = start + line.len() as u64;
        validator.line_number += 1;
        if !line.trim_ascii().is_empty() {
            validator.report.total_requests += 1;
            validator.add_to_chunks(start, end);
        }
        start = end;
    }
    validator.report
}

/// Validate the stream of an input file and plan its chunks within `limits`.
/// Memory holds one partial line and the set of custom ids, whatever the file's size.
pub async fn validate_input(
    mut bytes: ByteStream,
    endpoint: BatchEndpoint,
    model_exists: &(dyn Fn(&str) -> bool + Sync),
    limits: ChunkLimits,
) -> Result<ValidationReport, StorageError> {
    let mut validator = Validator {
        endpoint,
        model_exists,
        lines_per_chunk: limits.lines.max(1),
        max_chunk_bytes: limits.bytes.max(1),
        seen_ids: HashSet::new(),
        report: ValidationReport::default(),
        line_number: 0,
    };
    let mut partial: Vec<u8> = Vec::new();
    let mut partial_start: u64 = 0;
    let mut offset: u64 = 0;
    while let Some(chunk) = bytes.next().await {
        let chunk = chunk?;
        let mut rest: &[u8] = &chunk;
        while let Some(newline) = rest.iter().position(|b| *b == b'\n') {
            let (head, tail) = rest.split_at(newline + 1);
            let line_end = offset + head.len() as u64;
            if partial.is_empty() {
                validator.line(&head[..head.len() - 1], line_end - head.len() as u64, line_end);
            } else {
                partial.extend_from_slice(&head[..head.len() - 1]);
                let line = std::mem::take(&mut partial);
                validator.line(&line, partial_start, line_end);
            }
            offset = line_end;
            partial_start = offset;
            rest = tail;
        }
        if !rest.is_empty() {
            partial.extend_from_slice(rest);
            offset += rest.len() as u64;
        }
    }
    if !partial.is_empty() {
        validator.line(&partial, partial_start, offset);
    }
    Ok(validator.finish())
}

#[cfg(test)]
mod tests;
