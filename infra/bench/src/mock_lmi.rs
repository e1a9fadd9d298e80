//! `nimbus-mock-lmi`: a zero-latency DJL Serving / LMI container and SageMaker runtime, for the
//! LMI provider's end-to-end tests and benchmarks.
//!
//! Container paths: `POST /invocations` and `POST /predictions/{model}` (rolling batch, or chat when
//! the body has `messages`), `POST /{schema}/invocations` for each schema (`rolling_batch`,
//! `tgi_compat`, `dynamic_batch`, `chat`, `embedding`), `GET /ping`. SageMaker runtime paths:
//! `POST /endpoints/{name}/invocations` and `…/invocations-response-stream` (event-stream frames),
//! the schema chosen by the endpoint name's prefix (`rolling-batch`, `tgi-compat`, `dynamic-batch`,
//! `chat`, `embedding`; anything else is rolling batch, except names starting with `missing`: a
//! 400 `ValidationError`, as for an endpoint SageMaker does not know).
//!
//! Answers: `Hello from LMI` as the tokens `Hello`, ` from`, ` LMI` (finish `eos_token`), cut
//! early with `length` by `max_new_tokens` (chat: `max_tokens`/`max_completion_tokens`), or with
//! `stop_sequence` before a token whose trimmed text is a stop sequence (`stop_sequences`; chat:
//! `stop`). `details` (when asked) carries `tokens` (not in streams) and `prefill`, one token per
//! whitespace-separated word of `inputs`. Streams: rolling batch in JSON lines (SSE `data:{…}`
//! lines when `Accept` asks for `text/event-stream`), TGI-compatible as SSE `data: {…}` events,
//! dynamic batch as `{"outputs": [...]}` lines (one entry per input), chat as `chat.completion.chunk`
//! JSON lines with a final usage chunk when `stream_options.include_usage`. Embeddings: a list of
//! 8-dimension unit vectors, deterministic per input text.
//!
//! Markers in the prompt (the last user message, or `inputs`):
//! - `[lmi-424]` → 424 `{"error", "code": 424}` (dynamic batch: `{"code", "message", "error"}`);
//!   SageMaker: 424 `ModelError` with `OriginalStatusCode` and `OriginalMessage` (the container body).
//! - `[lmi-500]` → 500 (SageMaker: `ModelError`, `OriginalStatusCode` 500).
//! - `[lmi-throttle]` → 429 (SageMaker: 429 `ThrottlingException`).
//! - `[lmi-fail-times:N:KEY]` → the first N requests with KEY get 503 (SageMaker: `ServiceUnavailable`).
//! - `[lmi-error-finish]` → 200 with `details.finish_reason = "error"` (streamed: one token, then
//!   LMI's error token line); chat: `finish_reason: "error"`; dynamic batch: a 424.
//! - `[lmi-stream-error]` → SageMaker stream: one payload part, then a `ModelStreamError` exception
//!   frame (`ErrorCode` `StreamBroken`); container stream: the body breaks off after one line.
//! - `[lmi-typo]` → `"finish reason"` instead of `finish_reason` in `details`.
//! - `[lmi-no-prefill]` → no `details.prefill`.
//!
//! `GET /_requests` lists the recorded requests (`[{"path", "headers", "body"}]`, the oldest dropped
//! past `--record-limit`), `DELETE /_requests` clears them. With `--port 0` the first line on stdout
//! is `listening on 127.0.0.1:PORT`.

mod mock_server;
#[path = "mock_lmi/model.rs"]
mod model;
#[path = "mock_lmi/sagemaker.rs"]
mod sagemaker;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use futures::StreamExt;
use model::{FailureCounts, ModelOutput, Schema};
use serde_json::{json, Map, Value};
use std::collections::VecDeque;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

#[derive(Parser)]
#[command(
    name = "nimbus-mock-lmi",
    about = "Zero-latency DJL LMI container and SageMaker runtime mock"
)]
struct Args {
    /// Port to listen on (0 picks a free one; the chosen address is the first line on stdout).
    #[arg(long, env = "PORT", default_value_t = 8091)]
    port: u16,
    /// Address to bind.
    #[arg(long, env = "MOCK_BIND", default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Tokio worker threads (default: one per available core).
    #[arg(long, env = "MOCK_WORKER_THREADS")]
    worker_threads: Option<usize>,
    /// Requests kept for `GET /_requests` (the oldest are dropped past it; 0 records nothing).
    #[arg(long, env = "MOCK_RECORD_LIMIT", default_value_t = 10_000)]
    record_limit: usize,
}

struct MockState {
    record_limit: usize,
    requests: Mutex<VecDeque<Value>>,
    failure_counts: FailureCounts,
}

type Shared = Arc<MockState>;

impl MockState {
    /// Records one request and parses its body (`Null` when it is not JSON).
    fn record(&self, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> Value {
        let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        if self.record_limit == 0 {
            return parsed;
        }
        let header_map: Map<String, Value> = headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into(),
                )
            })
            .collect();
        let recorded_body = if parsed.is_null() {
            Value::String(String::from_utf8_lossy(body).into_owned())
        } else {
            parsed.clone()
        };
        let path = uri
            .path_and_query()
            .map_or_else(|| uri.path().to_owned(), |p| p.as_str().to_owned());
        let mut requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        if requests.len() >= self.record_limit {
            requests.pop_front();
        }
        requests.push_back(json!({"path": path, "headers": header_map, "body": recorded_body}));
        parsed
    }
}

fn asks_for_sse(headers: &HeaderMap, header: impl axum::http::header::AsHeaderName) -> bool {
    headers
        .get(header)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.contains("text/event-stream"))
}

/// The container's own HTTP answer.
fn container_response(output: ModelOutput) -> Response {
    match output {
        ModelOutput::Failed { status, body, .. } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (status, Json(body)).into_response()
        }
        ModelOutput::Document(document) => Json(document).into_response(),
        ModelOutput::Stream {
            format,
            lines,
            breaks_after_first,
        } => {
            let kept = if breaks_after_first { 1 } else { lines.len() };
            let chunks = lines.into_iter().take(kept).map(|line| Ok(Bytes::from(line)));
            // The break comes a moment after the first line, so that line reaches the client.
            let break_off = futures::stream::once(async {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                Err(std::io::Error::other("LMI mock: the stream broke ([lmi-stream-error])"))
            });
            let breaks = break_off.take(usize::from(breaks_after_first));
            let body = Body::from_stream(futures::stream::iter(chunks).chain(breaks));
            ([(CONTENT_TYPE, format.content_type())], body).into_response()
        }
    }
}

fn container(state: &MockState, schema: Schema, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> Response {
    let parsed = state.record(uri, headers, body);
    let sse = asks_for_sse(headers, ACCEPT);
    container_response(model::answer(schema, &parsed, sse, &state.failure_counts))
}

async fn invocations(State(state): State<Shared>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    container(&state, Schema::RollingBatch, &uri, &headers, &body)
}

async fn schema_invocations(
    State(state): State<Shared>,
    Path(segment): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match Schema::from_path_segment(&segment) {
        Some(schema) => container(&state, schema, &uri, &headers, &body),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": "unknown schema path", "code": 404})),
        )
            .into_response(),
    }
}

/// Answers a SageMaker call: the schema from the endpoint name, `respond` framing the model's output.
fn sagemaker_call(
    state: &MockState,
    endpoint: &str,
    request: (&Uri, &HeaderMap, &Bytes),
    accept: &str,
    respond: fn(&str, ModelOutput) -> Response,
) -> Response {
    let (uri, headers, body) = request;
    let parsed = state.record(uri, headers, body);
    if endpoint.starts_with("missing") {
        return sagemaker::validation_error(&format!("Endpoint {endpoint} of account 000000000000 not found."));
    }
    let schema = Schema::from_endpoint_name(endpoint);
    let sse = asks_for_sse(headers, accept);
    respond(endpoint, model::answer(schema, &parsed, sse, &state.failure_counts))
}

async fn sagemaker_invoke(
    State(state): State<Shared>,
    Path(endpoint): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    sagemaker_call(&state, &endpoint, (&uri, &headers, &body), "accept", sagemaker::invoke)
}

async fn sagemaker_invoke_stream(
    State(state): State<Shared>,
    Path(endpoint): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let accept = "x-amzn-sagemaker-accept";
    sagemaker_call(
        &state,
        &endpoint,
        (&uri, &headers, &body),
        accept,
        sagemaker::invoke_stream,
    )
}

async fn recorded(State(state): State<Shared>) -> Json<Vec<Value>> {
    Json(
        state
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect(),
    )
}

async fn clear_recorded(State(state): State<Shared>) -> StatusCode {
    state.requests.lock().unwrap_or_else(PoisonError::into_inner).clear();
    StatusCode::NO_CONTENT
}

async fn ping() -> Json<Value> {
    Json(json!({}))
}

fn router(state: Shared) -> Router {
    Router::new()
        .route("/ping", get(ping))
        .route("/health", get(ping))
        .route("/invocations", post(invocations))
        .route("/predictions/{model}", post(invocations))
        .route("/{schema}/invocations", post(schema_invocations))
        .route("/endpoints/{endpoint}/invocations", post(sagemaker_invoke))
        .route(
            "/endpoints/{endpoint}/invocations-response-stream",
            post(sagemaker_invoke_stream),
        )
        .route("/_requests", get(recorded).delete(clear_recorded))
        .with_state(state)
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let state = Arc::new(MockState {
        record_limit: args.record_limit,
        requests: Mutex::new(VecDeque::new()),
        failure_counts: FailureCounts::default(),
    });
    let address = SocketAddr::new(args.bind, args.port);
    mock_server::run(args.worker_threads, address, router(state), |local| {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "listening on {local}")?;
        stdout.flush()?;
        eprintln!("nimbus-mock-lmi listening on http://{local}");
        Ok(())
    })
}
