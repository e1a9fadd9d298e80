//! What the mock "model" answers: the request read in each LMI schema, the behaviour markers, the
//! fixed generation ("Hello from LMI", cut by `max_new_tokens` and stop sequences) and the bodies
//! or lines each schema returns. Nothing here knows about HTTP framing or SageMaker.

use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::Mutex;

/// The request schemas an LMI container speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schema {
    RollingBatch,
    TgiCompat,
    DynamicBatch,
    Chat,
    Embedding,
}

impl Schema {
    /// The schema named by a per-schema container path (`/{schema}/invocations`).
    pub fn from_path_segment(segment: &str) -> Option<Self> {
        match segment {
            "rolling_batch" => Some(Self::RollingBatch),
            "tgi_compat" => Some(Self::TgiCompat),
            "dynamic_batch" => Some(Self::DynamicBatch),
            "chat" => Some(Self::Chat),
            "embedding" => Some(Self::Embedding),
            _ => None,
        }
    }

    /// The schema a SageMaker endpoint name selects (prefix match; anything else is rolling batch).
    pub fn from_endpoint_name(name: &str) -> Self {
        const PREFIXES: [(&str, Schema); 5] = [
            ("rolling-batch", Schema::RollingBatch),
            ("tgi-compat", Schema::TgiCompat),
            ("dynamic-batch", Schema::DynamicBatch),
            ("chat", Schema::Chat),
            ("embedding", Schema::Embedding),
        ];
        PREFIXES
            .iter()
            .find(|(prefix, _)| name.starts_with(prefix))
            .map_or(Self::RollingBatch, |(_, schema)| *schema)
    }
}

/// One generated token of the fixed answer.
struct AnswerToken {
    id: i64,
    text: &'static str,
    log_prob: f64,
}

/// The answer every request gets, token by token.
const ANSWER: [AnswerToken; 3] = [
    AnswerToken {
        id: 15043,
        text: "Hello",
        log_prob: -0.125,
    },
    AnswerToken {
        id: 515,
        text: " from",
        log_prob: -0.5,
    },
    AnswerToken {
        id: 365,
        text: " LMI",
        log_prob: -0.0625,
    },
];

/// Why the generation ended, in LMI's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Finish {
    Length,
    EosToken,
    StopSequence,
}

impl Finish {
    fn lmi(self) -> &'static str {
        match self {
            Self::Length => "length",
            Self::EosToken => "eos_token",
            Self::StopSequence => "stop_sequence",
        }
    }

    fn openai(self) -> &'static str {
        match self {
            Self::Length => "length",
            Self::EosToken | Self::StopSequence => "stop",
        }
    }
}

/// The tokens produced for one request and why they stopped.
struct Generation {
    tokens: &'static [AnswerToken],
    finish: Finish,
}

impl Generation {
    fn new(max_new_tokens: Option<u64>, stop_sequences: &[String]) -> Self {
        for (index, token) in ANSWER.iter().enumerate() {
            if max_new_tokens.is_some_and(|max| index as u64 >= max) {
                return Self {
                    tokens: &ANSWER[..index],
                    finish: Finish::Length,
                };
            }
            if stop_sequences.iter().any(|stop| stop.trim() == token.text.trim()) {
                return Self {
                    tokens: &ANSWER[..index],
                    finish: Finish::StopSequence,
                };
            }
        }
        Self {
            tokens: &ANSWER,
            finish: Finish::EosToken,
        }
    }

    fn text(&self) -> String {
        self.tokens.iter().map(|token| token.text).collect()
    }
}

fn token_json(token: &AnswerToken) -> Value {
    json!({"id": token.id, "text": token.text, "log_prob": token.log_prob})
}

/// The token line that closes a stream in which nothing was generated.
fn empty_token_json() -> Value {
    json!({"id": 2, "text": "", "log_prob": 0.0, "special_token": true})
}

/// A failure decided by a marker before anything is generated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// `[lmi-424]`: the container rejects the input (424).
    Rejected,
    /// `[lmi-500]`: the container fails (500).
    Internal,
    /// `[lmi-throttle]`: too many requests (429).
    Throttled,
    /// `[lmi-fail-times:N:KEY]`: the model is not available yet (503).
    Unavailable,
}

/// The behaviour markers found in the prompt text.
#[derive(Default)]
struct Markers {
    failure: Option<Failure>,
    error_finish: bool,
    stream_error: bool,
    typo: bool,
    no_prefill: bool,
}

/// How many failures each `[lmi-fail-times:N:KEY]` key has had.
#[derive(Default)]
pub struct FailureCounts(Mutex<HashMap<String, u64>>);

impl FailureCounts {
    /// Counts one request for `key`; true while it is among the first `times`.
    fn should_fail(&self, key: &str, times: u64) -> bool {
        let mut counts = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let seen = counts.entry(key.to_owned()).or_insert(0);
        *seen += 1;
        *seen <= times
    }
}

impl Markers {
    fn find(text: &str, counts: &FailureCounts) -> Self {
        let fail_times = text.split("[lmi-fail-times:").nth(1).and_then(|rest| {
            let spec = rest.split(']').next()?;
            let (times, key) = spec.split_once(':')?;
            Some((times.parse::<u64>().ok()?, key.to_owned()))
        });
        let failure = if text.contains("[lmi-424]") {
            Some(Failure::Rejected)
        } else if text.contains("[lmi-500]") {
            Some(Failure::Internal)
        } else if text.contains("[lmi-throttle]") {
            Some(Failure::Throttled)
        } else if fail_times.is_some_and(|(times, key)| counts.should_fail(&key, times)) {
            Some(Failure::Unavailable)
        } else {
            None
        };
        Self {
            failure,
            error_finish: text.contains("[lmi-error-finish]"),
            stream_error: text.contains("[lmi-stream-error]"),
            typo: text.contains("[lmi-typo]"),
            no_prefill: text.contains("[lmi-no-prefill]"),
        }
    }
}

/// How a stream's lines are framed on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineFormat {
    /// `application/jsonlines`: one JSON document per line.
    JsonLines,
    /// `text/event-stream` as LMI's `output_formatter=sse` writes it: `data:{...}` per line.
    SseCompact,
    /// `text/event-stream` as TGI writes it: `data: {...}` and a blank line.
    SseSpaced,
}

impl LineFormat {
    pub fn content_type(self) -> &'static str {
        match self {
            Self::JsonLines => "application/jsonlines",
            Self::SseCompact | Self::SseSpaced => "text/event-stream",
        }
    }

    fn frame(self, document: &Value) -> String {
        match self {
            Self::JsonLines => format!("{document}\n"),
            Self::SseCompact => format!("data:{document}\n"),
            Self::SseSpaced => format!("data: {document}\n\n"),
        }
    }
}

/// What the model answers, before any transport framing.
pub enum ModelOutput {
    /// A failure before generation: the container's status and body.
    Failed { failure: Failure, status: u16, body: Value },
    /// A whole JSON document (status 200).
    Document(Value),
    /// A stream: the framed lines, and whether the stream breaks after the first one.
    Stream {
        format: LineFormat,
        lines: Vec<String>,
        breaks_after_first: bool,
    },
}

impl ModelOutput {
    fn failed(failure: Failure, dynamic_batch: bool) -> Self {
        let (status, message) = match failure {
            Failure::Rejected => (424, "LMI mock: input rejected by the model ([lmi-424])"),
            Failure::Internal => (500, "LMI mock: internal model failure ([lmi-500])"),
            Failure::Throttled => (429, "LMI mock: too many requests ([lmi-throttle])"),
            Failure::Unavailable => (503, "LMI mock: model not ready ([lmi-fail-times])"),
        };
        Self::invalid_with(failure, status, message, dynamic_batch)
    }

    fn invalid(message: &str, dynamic_batch: bool) -> Self {
        Self::invalid_with(Failure::Rejected, 424, message, dynamic_batch)
    }

    fn invalid_with(failure: Failure, status: u16, message: &str, dynamic_batch: bool) -> Self {
        let body = if dynamic_batch {
            json!({"code": status, "message": "invoke handler failure", "error": message})
        } else {
            json!({"error": message, "code": status})
        };
        Self::Failed { failure, status, body }
    }
}

/// What a request asks, read leniently from its JSON body.
struct Request<'a> {
    body: &'a Map<String, Value>,
    parameters: Option<&'a Map<String, Value>>,
}

impl<'a> Request<'a> {
    fn new(body: &'a Map<String, Value>) -> Self {
        Self {
            body,
            parameters: body.get("parameters").and_then(Value::as_object),
        }
    }

    fn parameter(&self, name: &str) -> Option<&'a Value> {
        self.parameters.and_then(|parameters| parameters.get(name))
    }

    fn flag(&self, name: &str) -> bool {
        self.parameter(name).and_then(Value::as_bool).unwrap_or(false)
    }

    fn streams(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool).unwrap_or(false)
    }

    fn stop_sequences(&self) -> Vec<String> {
        string_list(self.parameter("stop_sequences"))
    }
}

/// A string or a list of strings as a list (anything else: empty).
fn string_list(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}

/// The text of a chat message's content (a string, or the text parts of a list).
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

fn word_count(text: &str) -> usize {
    text.split_whitespace().count()
}

/// Answers one request in `schema`; `sse` asks for SSE framing of a rolling-batch or chat stream.
pub fn answer(schema: Schema, body: &Value, sse: bool, counts: &FailureCounts) -> ModelOutput {
    let dynamic_batch = schema == Schema::DynamicBatch;
    let Some(object) = body.as_object() else {
        return ModelOutput::invalid("the request body must be a JSON object", dynamic_batch);
    };
    let schema = if schema == Schema::RollingBatch && object.contains_key("messages") {
        Schema::Chat
    } else {
        schema
    };
    let request = Request::new(object);
    match schema {
        Schema::RollingBatch | Schema::TgiCompat => text_generation(schema, &request, sse, counts),
        Schema::DynamicBatch => dynamic_batch_answer(&request, counts),
        Schema::Chat => chat(&request, sse, counts),
        Schema::Embedding => embedding(&request, counts),
    }
}

fn text_generation(schema: Schema, request: &Request, sse: bool, counts: &FailureCounts) -> ModelOutput {
    let Some(prompt) = request.body.get("inputs").and_then(Value::as_str) else {
        return ModelOutput::invalid("`inputs` must be a string", false);
    };
    let markers = Markers::find(prompt, counts);
    if let Some(failure) = markers.failure {
        return ModelOutput::failed(failure, false);
    }
    let max_new_tokens = request.parameter("max_new_tokens").and_then(Value::as_u64);
    let generation = Generation::new(max_new_tokens, &request.stop_sequences());
    let with_details = request.flag("details");
    let mut generated_text = generation.text();
    if request.flag("return_full_text") {
        generated_text = format!("{prompt}{generated_text}");
    }
    let details = |with_tokens: bool| {
        let mut details = Map::new();
        let finish_key = if markers.typo { "finish reason" } else { "finish_reason" };
        details.insert(finish_key.into(), generation.finish.lmi().into());
        details.insert("generated_tokens".into(), generation.tokens.len().into());
        details.insert("inputs".into(), prompt.into());
        if with_tokens {
            details.insert("tokens".into(), generation.tokens.iter().map(token_json).collect());
        }
        if !markers.no_prefill {
            let prefill = prompt
                .split_whitespace()
                .enumerate()
                .map(|(index, word)| json!({"id": 1000 + index, "text": word, "log_prob": null}))
                .collect();
            details.insert("prefill".into(), prefill);
        }
        Value::Object(details)
    };
    if !request.streams() {
        let document = if markers.error_finish {
            json!({"generated_text": "", "details": {
                "finish_reason": "error", "generated_tokens": null, "inputs": null, "tokens": null}})
        } else if with_details {
            json!({"generated_text": generated_text, "details": details(true)})
        } else {
            json!({"generated_text": generated_text})
        };
        return ModelOutput::Document(if schema == Schema::TgiCompat {
            json!([document])
        } else {
            document
        });
    }
    let format = match (schema, sse) {
        (Schema::TgiCompat, _) => LineFormat::SseSpaced,
        (_, true) => LineFormat::SseCompact,
        (_, false) => LineFormat::JsonLines,
    };
    let mut lines = Vec::new();
    if markers.error_finish {
        lines.push(format.frame(&json!({"token": token_json(&ANSWER[0])})));
        lines.push(format.frame(&json!({
            "token": {"id": -1, "text": "", "log_prob": -1, "special_token": true},
            "generated_text": "",
            "details": {"finish_reason": "error", "generated_tokens": null, "inputs": null}
        })));
        return ModelOutput::Stream {
            format,
            lines,
            breaks_after_first: false,
        };
    }
    let (last, leading) = match generation.tokens.split_last() {
        Some((last, leading)) => (token_json(last), leading),
        None => (empty_token_json(), &[][..]),
    };
    for token in leading {
        lines.push(format.frame(&json!({"token": token_json(token)})));
    }
    let mut closing = json!({"token": last, "generated_text": generated_text});
    if with_details {
        closing["details"] = details(false);
    }
    lines.push(format.frame(&closing));
    ModelOutput::Stream {
        format,
        lines,
        breaks_after_first: markers.stream_error,
    }
}

fn dynamic_batch_answer(request: &Request, counts: &FailureCounts) -> ModelOutput {
    let inputs = match request.body.get("inputs") {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_string) => {
            string_list(request.body.get("inputs"))
        }
        _ => return ModelOutput::invalid("`inputs` must be a string or a list of strings", true),
    };
    let markers = Markers::find(&inputs.join("\n"), counts);
    if let Some(failure) = markers.failure {
        return ModelOutput::failed(failure, true);
    }
    if markers.error_finish {
        return ModelOutput::invalid("LMI mock: generation failed ([lmi-error-finish])", true);
    }
    let max_new_tokens = request.parameter("max_new_tokens").and_then(Value::as_u64);
    let generation = Generation::new(max_new_tokens, &request.stop_sequences());
    if !request.streams() {
        let text = generation.text();
        return ModelOutput::Document(inputs.iter().map(|_| json!({"generated_text": text})).collect());
    }
    let format = LineFormat::JsonLines;
    let lines = generation
        .tokens
        .iter()
        .map(|token| format.frame(&json!({"outputs": vec![token.text; inputs.len()]})))
        .collect();
    ModelOutput::Stream {
        format,
        lines,
        breaks_after_first: markers.stream_error,
    }
}

/// The fixed id and creation time of every chat answer (deterministic, so streams compare equal).
const CHAT_ID: &str = "chatcmpl-mock-lmi";
const CREATED: u64 = 1_735_689_600;

fn chat(request: &Request, sse: bool, counts: &FailureCounts) -> ModelOutput {
    let Some(messages) = request.body.get("messages").and_then(Value::as_array) else {
        return ModelOutput::invalid("`messages` must be a list", false);
    };
    let last_user = messages
        .iter()
        .rev()
        .find(|message| message.get("role").and_then(Value::as_str) == Some("user"))
        .map(|message| content_text(message.get("content")))
        .unwrap_or_default();
    let markers = Markers::find(&last_user, counts);
    if let Some(failure) = markers.failure {
        return ModelOutput::failed(failure, false);
    }
    let max_tokens = ["max_completion_tokens", "max_tokens", "max_new_tokens"]
        .iter()
        .find_map(|name| request.body.get(*name).and_then(Value::as_u64));
    let generation = Generation::new(max_tokens, &string_list(request.body.get("stop")));
    let model = request.body.get("model").and_then(Value::as_str).unwrap_or("lmi");
    let prompt_tokens: usize = messages
        .iter()
        .map(|message| word_count(&content_text(message.get("content"))))
        .sum();
    let completion_tokens = generation.tokens.len();
    let usage = json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens
    });
    let finish = if markers.error_finish {
        "error"
    } else {
        generation.finish.openai()
    };
    if !request.streams() {
        let content = if markers.error_finish {
            String::new()
        } else {
            generation.text()
        };
        return ModelOutput::Document(json!({
            "id": CHAT_ID, "object": "chat.completion", "created": CREATED, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "logprobs": null, "finish_reason": finish}],
            "usage": usage
        }));
    }
    let format = if sse {
        LineFormat::SseCompact
    } else {
        LineFormat::JsonLines
    };
    let chunk = |delta: Value, finish_reason: Option<&str>| {
        json!({"id": CHAT_ID, "object": "chat.completion.chunk", "created": CREATED, "model": model,
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}]})
    };
    let tokens = if markers.error_finish {
        &ANSWER[..1]
    } else {
        generation.tokens
    };
    let mut lines: Vec<String> = tokens
        .iter()
        .enumerate()
        .map(|(index, token)| {
            let delta = if index == 0 {
                json!({"role": "assistant", "content": token.text})
            } else {
                json!({"content": token.text})
            };
            format.frame(&chunk(delta, None))
        })
        .collect();
    lines.push(format.frame(&chunk(json!({}), Some(finish))));
    let include_usage = request
        .body
        .get("stream_options")
        .and_then(|options| options.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if include_usage && !markers.error_finish {
        lines.push(format.frame(&json!({
            "id": CHAT_ID, "object": "chat.completion.chunk", "created": CREATED, "model": model,
            "choices": [], "usage": usage
        })));
    }
    ModelOutput::Stream {
        format,
        lines,
        breaks_after_first: markers.stream_error,
    }
}

/// Dimensions of the mock's embedding vectors.
pub const EMBEDDING_DIMENSIONS: usize = 8;

/// A deterministic unit vector for `text` (FNV-1a of the text spread over the dimensions).
fn embed(text: &str) -> Vec<f64> {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut raw = Vec::with_capacity(EMBEDDING_DIMENSIONS);
    for dimension in 0..EMBEDDING_DIMENSIONS {
        for byte in text.bytes().chain([dimension as u8]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        raw.push(((hash >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0);
    }
    let norm = raw
        .iter()
        .map(|value| value * value)
        .sum::<f64>()
        .sqrt()
        .max(f64::MIN_POSITIVE);
    raw.iter().map(|value| value / norm).collect()
}

fn embedding(request: &Request, counts: &FailureCounts) -> ModelOutput {
    let inputs = match request.body.get("inputs") {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_string) => {
            string_list(request.body.get("inputs"))
        }
        _ => return ModelOutput::invalid("`inputs` must be a string or a list of strings", false),
    };
    let markers = Markers::find(&inputs.join("\n"), counts);
    if let Some(failure) = markers.failure {
        return ModelOutput::failed(failure, false);
    }
    ModelOutput::Document(inputs.iter().map(|text| json!(embed(text))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream_lines(output: ModelOutput) -> Vec<Value> {
        match output {
            ModelOutput::Stream { lines, .. } => lines
                .iter()
                .map(|line| {
                    let json = line.trim().trim_start_matches("data:").trim();
                    serde_json::from_str(json).expect("each line is JSON")
                })
                .collect(),
            _ => panic!("expected a stream"),
        }
    }

    #[test]
    fn rolling_batch_answers_with_details_and_prefill() {
        let counts = FailureCounts::default();
        let body = json!({"inputs": "two words", "parameters": {"details": true}});
        let ModelOutput::Document(doc) = answer(Schema::RollingBatch, &body, false, &counts) else {
            panic!("expected a document");
        };
        assert_eq!(doc["generated_text"], "Hello from LMI");
        assert_eq!(doc["details"]["finish_reason"], "eos_token");
        assert_eq!(doc["details"]["generated_tokens"], 3);
        assert_eq!(doc["details"]["prefill"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn max_new_tokens_and_stop_sequences_cut_the_answer() {
        let counts = FailureCounts::default();
        let body = json!({"inputs": "x", "parameters": {"details": true, "max_new_tokens": 2}});
        let ModelOutput::Document(doc) = answer(Schema::RollingBatch, &body, false, &counts) else {
            panic!("expected a document");
        };
        assert_eq!(
            (doc["generated_text"].as_str(), doc["details"]["finish_reason"].as_str()),
            (Some("Hello from"), Some("length"))
        );
        let body = json!({"inputs": "x", "parameters": {"details": true, "stop_sequences": ["LMI"]}});
        let ModelOutput::Document(doc) = answer(Schema::TgiCompat, &body, false, &counts) else {
            panic!("expected a document");
        };
        assert_eq!(doc[0]["details"]["finish_reason"], "stop_sequence");
        assert_eq!(doc[0]["generated_text"], "Hello from");
    }

    #[test]
    fn fail_times_fails_the_first_requests_of_a_key_only() {
        let counts = FailureCounts::default();
        let body = json!({"inputs": "[lmi-fail-times:2:k1]"});
        let statuses: Vec<u16> = (0..3)
            .map(|_| match answer(Schema::RollingBatch, &body, false, &counts) {
                ModelOutput::Failed { status, .. } => status,
                _ => 200,
            })
            .collect();
        assert_eq!(statuses, [503, 503, 200]);
    }

    #[test]
    fn streams_end_with_details_or_an_error_token() {
        let counts = FailureCounts::default();
        let body = json!({"inputs": "a b c", "stream": true, "parameters": {"details": true}});
        let lines = stream_lines(answer(Schema::RollingBatch, &body, false, &counts));
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[2]["details"]["finish_reason"], "eos_token");
        assert_eq!(lines[2]["generated_text"], "Hello from LMI");
        let body = json!({"inputs": "[lmi-error-finish] [lmi-typo]", "stream": true});
        let lines = stream_lines(answer(Schema::RollingBatch, &body, false, &counts));
        assert_eq!(lines[1]["details"]["finish_reason"], "error");
        assert_eq!(lines[1]["token"]["id"], -1);
    }

    #[test]
    fn chat_streams_chunks_and_a_usage_chunk() {
        let counts = FailureCounts::default();
        let body = json!({"messages": [{"role": "user", "content": "hi there"}], "stream": true,
                          "stream_options": {"include_usage": true}});
        let lines = stream_lines(answer(Schema::RollingBatch, &body, false, &counts));
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[3]["choices"][0]["finish_reason"], "stop");
        assert_eq!(lines[4]["usage"]["prompt_tokens"], 2);
        assert_eq!(lines[4]["usage"]["completion_tokens"], 3);
    }

    #[test]
    fn embeddings_are_deterministic_unit_vectors() {
        let first = embed("a");
        assert_eq!(first, embed("a"));
        assert_ne!(first, embed("b"));
        let norm: f64 = first.iter().map(|v| v * v).sum();
        assert!((norm - 1.0).abs() < 1e-9);
    }
}
