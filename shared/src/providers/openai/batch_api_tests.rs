//! The OpenAI Batch API client against a local mock upstream (and a second host it redirects to).

use super::*;
use crate::config::CredentialLocation;
use crate::model::{ContentBlock, ExtraBodyEntry};
use crate::providers::openai::tests::{chat_request, layered_provider, provider, start_mock};
use crate::providers::{ChatProvider, EmbeddingProvider};
use axum::extract::{Multipart, Path, Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

/// One request as the mock saw it.
#[derive(Debug, Clone)]
struct Call {
    method: String,
    path_and_query: String,
    auth: Option<String>,
    team: Option<String>,
    idempotency_key: Option<String>,
}

#[derive(Default)]
struct Upstream {
    calls: Vec<Call>,
    /// Each uploaded form's fields.
    uploads: Vec<Vec<FormField>>,
    created: Vec<Value>,
    /// Where file content redirects to.
    other_host: String,
}

/// One field of a multipart form: name, file name, bytes.
type FormField = (String, Option<String>, Vec<u8>);

type Shared = Arc<Mutex<Upstream>>;

async fn record(State(upstream): State<Shared>, request: Request, next: Next) -> Response {
    let call = read_call(&request);
    upstream.lock().unwrap().calls.push(call);
    next.run(request).await
}

fn read_call(request: &Request) -> Call {
    let header = |name: &str| request.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
    Call {
        method: request.method().to_string(),
        path_and_query: request.uri().path_and_query().unwrap().to_string(),
        auth: header("authorization"),
        team: header("x-team"),
        idempotency_key: header("idempotency-key"),
    }
}

fn batch_object(id: &str, status: &str, created_at: i64, metadata: Value) -> Value {
    json!({
        "id": id, "object": "batch", "endpoint": "/v1/chat/completions", "errors": null,
        "input_file_id": "file-in", "completion_window": "24h", "status": status,
        "output_file_id": null, "error_file_id": null, "created_at": created_at,
        "request_counts": {"total": 2, "completed": 1, "failed": 0}, "metadata": metadata,
    })
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": {"message": "No such object", "type": "invalid_request_error"}})),
    )
        .into_response()
}

async fn upload(State(upstream): State<Shared>, mut form: Multipart) -> Json<Value> {
    let mut fields = Vec::new();
    while let Some(field) = form.next_field().await.unwrap() {
        let name = field.name().unwrap().to_owned();
        let file_name = field.file_name().map(str::to_owned);
        fields.push((name, file_name, field.bytes().await.unwrap().to_vec()));
    }
    upstream.lock().unwrap().uploads.push(fields);
    Json(json!({"id": "file-up", "object": "file", "purpose": "batch", "filename": "jobs.jsonl"}))
}

async fn list_files(Query(query): Query<HashMap<String, String>>) -> Json<Value> {
    let file = |id: &str, filename: &str| json!({"id": id, "object": "file", "purpose": "batch", "filename": filename});
    match query.get("after").map(String::as_str) {
        None => Json(json!({"object": "list", "has_more": true,
                            "data": [file("file-a", "a.jsonl"), file("file-b", "b.jsonl")]})),
        Some("file-b") => Json(json!({"object": "list", "has_more": false, "data": [file("file-c", "wanted.jsonl")]})),
        Some(other) => panic!("unexpected cursor {other}"),
    }
}

async fn create(State(upstream): State<Shared>, Json(body): Json<Value>) -> Json<Value> {
    upstream.lock().unwrap().created.push(body.clone());
    Json(batch_object("batch_new", "validating", 1_000, body["metadata"].clone()))
}

/// Newest first: 300, 200 | 100 | 50 (three pages).
async fn list_batches(Query(query): Query<HashMap<String, String>>) -> Json<Value> {
    assert_eq!(query.get("limit").map(String::as_str), Some("100"));
    let batch = |id: &str, created: i64, job: &str| batch_object(id, "completed", created, json!({"job": job}));
    let (data, has_more) = match query.get("after").map(String::as_str) {
        None => (vec![batch("batch_3", 300, "j3"), batch("batch_2", 200, "j2")], true),
        Some("batch_2") => (vec![batch("batch_1", 100, "j1")], true),
        Some("batch_1") => (vec![batch("batch_0", 50, "j0")], false),
        Some(other) => panic!("unexpected cursor {other}"),
    };
    Json(json!({"object": "list", "data": data, "has_more": has_more}))
}

async fn read_batch(Path(id): Path<String>) -> Response {
    match id.as_str() {
        "batch_missing" => not_found(),
        "batch_boom" => (StatusCode::INTERNAL_SERVER_ERROR, "upstream fell over").into_response(),
        "batch_stuck" => Json(batch_object(&id, "in_progress", 1, json!({}))).into_response(),
        _ => {
            let mut batch = batch_object(&id, "completed", 1, json!({"job": "j"}));
            batch["output_file_id"] = json!("file-out");
            batch["errors"] = json!({"object": "list", "data": [
                {"code": "invalid_url", "message": "bad url", "param": "url", "line": 2},
                {"code": "too_long", "message": "too many tokens", "param": null, "line": null}]});
            Json(batch).into_response()
        }
    }
}

async fn cancel(Path(id): Path<String>) -> Response {
    match id.as_str() {
        "batch_missing" => not_found(),
        "batch_done" | "batch_stuck" => (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": {"message": "Cannot cancel a batch with status 'completed'."}})),
        )
            .into_response(),
        _ => Json(batch_object(&id, "cancelling", 1, json!({}))).into_response(),
    }
}

async fn file_content(State(upstream): State<Shared>, Path(id): Path<String>) -> Response {
    match id.as_str() {
        "file-missing" => not_found(),
        "file-local" => "local bytes\n".into_response(),
        _ => {
            let location = format!("{}/presigned/{id}?sig=1", upstream.lock().unwrap().other_host);
            (StatusCode::TEMPORARY_REDIRECT, [("location", location)]).into_response()
        }
    }
}

async fn delete_file(Path(id): Path<String>) -> Response {
    if id == "file-gone" {
        return not_found();
    }
    Json(json!({"id": id, "object": "file", "deleted": true})).into_response()
}

async fn presigned(Path(id): Path<String>) -> String {
    format!("{{\"custom_id\": \"{id}\"}}\n")
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// The path and query of every call `upstream` has seen.
fn paths(upstream: &Shared) -> Vec<String> {
    let upstream = upstream.lock().unwrap();
    upstream.calls.iter().map(|c| c.path_and_query.clone()).collect()
}

/// A provider of a mock upstream, the upstream's record of calls, and the other host's.
async fn start_upstream() -> (OpenAiProvider, Shared, Shared) {
    let elsewhere = Shared::default();
    let other_host = serve(
        Router::new()
            .route("/presigned/{id}", get(presigned))
            .layer(middleware::from_fn_with_state(elsewhere.clone(), record)),
    )
    .await;
    let upstream = Arc::new(Mutex::new(Upstream {
        other_host,
        ..Upstream::default()
    }));
    let app = Router::new()
        .route("/v1/files", post(upload).get(list_files))
        .route("/v1/files/{id}", axum::routing::delete(delete_file))
        .route("/v1/files/{id}/content", get(file_content))
        .route("/v1/batches", post(create).get(list_batches))
        .route("/v1/batches/{id}", get(read_batch))
        .route("/v1/batches/{id}/cancel", post(cancel))
        .layer(middleware::from_fn_with_state(upstream.clone(), record))
        .with_state(upstream.clone());
    let base = format!("{}/v1", serve(app).await);
    let provider = provider(base, CredentialLocation::Dynamic("k".into()));
    (provider, upstream, elsewhere)
}

/// The dynamic credential the provider's key is read from.
static CREDENTIALS: LazyLock<HashMap<String, String>> =
    LazyLock::new(|| [("k".to_owned(), "secret".to_owned())].into_iter().collect());

fn ctx() -> CallContext<'static> {
    CallContext {
        credentials: &CREDENTIALS,
    }
}

#[tokio::test]
async fn files_are_uploaded_as_batch_multipart_forms_and_found_by_name_across_pages() {
    let (provider, upstream, _) = start_upstream().await;
    let ctx = ctx();
    let content = Bytes::from_static(b"{\"custom_id\": \"1\"}\n{\"custom_id\": \"2\"}\n");
    let id = provider.upload_file("jobs.jsonl", content.clone(), ctx).await.unwrap();
    assert_eq!(id, "file-up");
    assert_eq!(
        provider.find_file("wanted.jsonl", ctx).await.unwrap().as_deref(),
        Some("file-c")
    );
    assert_eq!(provider.find_file("nowhere.jsonl", ctx).await.unwrap(), None);

    let upstream = upstream.lock().unwrap();
    let mut fields = upstream.uploads[0].clone();
    fields.sort();
    assert_eq!(
        fields,
        vec![
            ("file".to_owned(), Some("jobs.jsonl".to_owned()), content.to_vec()),
            ("purpose".to_owned(), None, b"batch".to_vec()),
        ]
    );
    let listings: Vec<&str> = upstream.calls[1..3].iter().map(|c| c.path_and_query.as_str()).collect();
    assert_eq!(
        listings,
        ["/v1/files?purpose=batch", "/v1/files?purpose=batch&after=file-b"]
    );
}

#[tokio::test]
async fn every_call_carries_the_key_and_configured_headers() {
    let (provider, upstream, _) = start_upstream().await;
    let ctx = ctx();
    provider
        .upload_file("f.jsonl", Bytes::from_static(b"x"), ctx)
        .await
        .unwrap();
    provider.find_file("f.jsonl", ctx).await.unwrap();
    provider
        .create_batch("file-up", "/v1/chat/completions", &BTreeMap::new(), "key-1", ctx)
        .await
        .unwrap();
    provider.find_batch("job", "j2", 0, ctx).await.unwrap();
    provider.batch("batch_x", ctx).await.unwrap();
    provider.cancel_batch("batch_x", ctx).await.unwrap();
    provider.file_content("file-local", ctx).await.unwrap();
    provider.delete_file("file-x", ctx).await.unwrap();
    let calls = upstream.lock().unwrap().calls.clone();
    let methods: Vec<&str> = calls.iter().map(|c| c.method.as_str()).collect();
    // The file listing takes two pages.
    assert_eq!(
        methods,
        ["POST", "GET", "GET", "POST", "GET", "GET", "POST", "GET", "DELETE"]
    );
    for call in &calls {
        assert_eq!(call.auth.as_deref(), Some("Bearer secret"), "{call:?}");
        assert_eq!(call.team.as_deref(), Some("ml"), "{call:?}");
    }
}

#[tokio::test]
async fn batches_are_created_with_a_24h_window_metadata_and_an_idempotency_key() {
    let (provider, upstream, _) = start_upstream().await;
    let ctx = ctx();
    let metadata: BTreeMap<String, String> = [("nimbus_job".to_owned(), "job-1".to_owned())].into();
    let batch = provider
        .create_batch("file-in", "/v1/embeddings", &metadata, "job-1-create", ctx)
        .await
        .unwrap();
    assert_eq!(batch.id, "batch_new");
    assert_eq!(batch.status, ProviderBatchStatus::Validating);
    assert_eq!(batch.metadata, metadata);
    assert_eq!(batch.created_at, 1_000);
    let upstream = upstream.lock().unwrap();
    assert_eq!(
        upstream.created[0],
        json!({"input_file_id": "file-in", "endpoint": "/v1/embeddings", "completion_window": "24h",
               "metadata": {"nimbus_job": "job-1"}})
    );
    assert_eq!(upstream.calls[0].idempotency_key.as_deref(), Some("job-1-create"));
}

#[tokio::test]
async fn find_batch_pages_back_and_stops_at_older_batches() {
    let (provider, upstream, _) = start_upstream().await;
    let ctx = ctx();
    let found = provider.find_batch("job", "j0", 0, ctx).await.unwrap().unwrap();
    assert_eq!((found.id.as_str(), found.created_at), ("batch_0", 50));
    assert_eq!(upstream.lock().unwrap().calls.len(), 3, "three pages");

    upstream.lock().unwrap().calls.clear();
    assert_eq!(provider.find_batch("job", "j1", 250, ctx).await.unwrap(), None);
    let calls = upstream.lock().unwrap().calls.clone();
    assert_eq!(calls.len(), 1, "batch_2 is older than asked: no further pages");
    assert_eq!(calls[0].path_and_query, "/v1/batches?limit=100");

    upstream.lock().unwrap().calls.clear();
    let found = provider.find_batch("job", "j1", 100, ctx).await.unwrap().unwrap();
    assert_eq!(found.id, "batch_1");
    let cursors = paths(&upstream);
    assert_eq!(
        cursors,
        ["/v1/batches?limit=100", "/v1/batches?limit=100&after=batch_2"]
    );
    assert_eq!(provider.find_batch("other", "j1", 0, ctx).await.unwrap(), None);
}

#[tokio::test]
async fn batches_read_with_counts_files_and_errors() {
    let (provider, _, _) = start_upstream().await;
    let ctx = ctx();
    let batch = provider.batch("batch_done", ctx).await.unwrap().unwrap();
    assert_eq!(batch.status, ProviderBatchStatus::Completed);
    assert!(batch.status.is_terminal());
    assert_eq!(
        batch.counts,
        ProviderCounts {
            total: 2,
            completed: 1,
            failed: 0
        }
    );
    assert_eq!(batch.output_file_id.as_deref(), Some("file-out"));
    assert_eq!(batch.error_file_id, None);
    assert_eq!(
        batch.errors,
        ["invalid_url: bad url (line 2)", "too_long: too many tokens"]
    );
}

#[tokio::test]
async fn unknown_batches_and_files_are_none_and_deleting_a_gone_file_is_fine() {
    let (provider, _, _) = start_upstream().await;
    let ctx = ctx();
    assert_eq!(provider.batch("batch_missing", ctx).await.unwrap(), None);
    assert_eq!(provider.cancel_batch("batch_missing", ctx).await.unwrap(), None);
    assert_eq!(provider.file_content("file-missing", ctx).await.unwrap(), None);
    provider.delete_file("file-gone", ctx).await.unwrap();
    provider.delete_file("file-here", ctx).await.unwrap();
}

#[tokio::test]
async fn cancelling_answers_the_batch_and_an_ended_batch_as_it_ended() {
    let (provider, upstream, _) = start_upstream().await;
    let ctx = ctx();
    let cancelling = provider.cancel_batch("batch_running", ctx).await.unwrap().unwrap();
    assert_eq!(cancelling.status, ProviderBatchStatus::Cancelling);
    let ended = provider.cancel_batch("batch_done", ctx).await.unwrap().unwrap();
    assert_eq!(ended.status, ProviderBatchStatus::Completed);
    assert_eq!(ended.output_file_id.as_deref(), Some("file-out"));
    assert_eq!(
        paths(&upstream),
        [
            "/v1/batches/batch_running/cancel",
            "/v1/batches/batch_done/cancel",
            "/v1/batches/batch_done"
        ]
    );
    // A refusal for a batch that is still running is the upstream's error.
    let err = provider.cancel_batch("batch_stuck", ctx).await.unwrap_err();
    assert!(matches!(err, ProviderError::Http { status: 400, .. }), "{err:?}");
}

#[tokio::test]
async fn file_content_follows_a_redirect_to_another_host_without_the_key() {
    let (provider, upstream, elsewhere) = start_upstream().await;
    let ctx = ctx();
    let content = provider.file_content("file-out", ctx).await.unwrap().unwrap();
    assert_eq!(&content[..], b"{\"custom_id\": \"file-out\"}\n");
    assert_eq!(upstream.lock().unwrap().calls[0].auth.as_deref(), Some("Bearer secret"));
    let there = elsewhere.lock().unwrap().calls.clone();
    assert_eq!(there.len(), 1);
    assert_eq!(there[0].path_and_query, "/presigned/file-out?sig=1");
    assert_eq!(there[0].auth, None, "the API key must not reach another host");
    let local = provider.file_content("file-local", ctx).await.unwrap().unwrap();
    assert_eq!(&local[..], b"local bytes\n");
}

#[tokio::test]
async fn ids_are_one_escaped_path_segment() {
    let (provider, upstream, _) = start_upstream().await;
    let ctx = ctx();
    assert_eq!(
        provider.batch("../files/x?y", ctx).await.unwrap().unwrap().id,
        "../files/x?y"
    );
    assert_eq!(
        upstream.lock().unwrap().calls[0].path_and_query,
        "/v1/batches/..%2Ffiles%2Fx%3Fy"
    );
}

#[tokio::test]
async fn upstream_failures_are_http_errors_with_their_status() {
    let (provider, _, _) = start_upstream().await;
    let ctx = ctx();
    let err = provider.batch("batch_boom", ctx).await.unwrap_err();
    let ProviderError::Http { status, message, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!((*status, message.as_str()), (500, "upstream fell over"));
    assert!(err.is_retryable());
    let none = HashMap::new();
    let err = provider
        .batch("batch_done", CallContext { credentials: &none })
        .await
        .unwrap_err();
    assert_eq!(err, ProviderError::MissingCredential("k".into()));
}

#[tokio::test]
async fn chat_lines_carry_exactly_the_synchronous_body() {
    let (base, seen) = start_mock().await;
    let provider = layered_provider(base);
    let mut request = chat_request("hi");
    request.extra_body = vec![ExtraBodyEntry::set("/from_request", json!(true))];
    let none = HashMap::new();
    provider
        .chat(&request, CallContext { credentials: &none })
        .await
        .unwrap();
    let line_body = NativeBatchApi::chat_body(&provider, &request).unwrap();
    let sent = seen.lock().unwrap().bodies[0].clone();
    assert_eq!(line_body, sent);
    assert_eq!(line_body["layer"], "provider");
    assert_eq!(line_body["from_request"], true);
    assert_eq!(line_body["model"], "upstream-model");
    assert!(line_body.get("stream").is_none(), "{line_body}");
}

#[tokio::test]
async fn embeddings_lines_and_answers_read_like_the_synchronous_call() {
    let (base, _) = start_mock().await;
    let provider = provider(base, CredentialLocation::None);
    let request: EmbeddingRequest =
        serde_json::from_value(json!({"model": "alias", "input": ["a", "b"], "dimensions": 2})).unwrap();
    assert_eq!(
        provider.embeddings_body(&request).unwrap(),
        json!({"model": "upstream-model", "input": ["a", "b"], "encoding_format": "float", "dimensions": 2})
    );
    let none = HashMap::new();
    let synchronous = provider
        .embed(&request, CallContext { credentials: &none })
        .await
        .unwrap();
    // The mock's answer, as an output line's body would carry it.
    let body = json!({"object": "list", "model": "up", "data": [
        {"object": "embedding", "index": 1, "embedding": [1.0, 0.5]},
        {"object": "embedding", "index": 0, "embedding": [0.0, 0.5]}],
        "usage": {"prompt_tokens": 4, "total_tokens": 4}});
    assert_eq!(provider.embeddings_answer(&body).unwrap(), synchronous);
}

#[test]
fn chat_answers_parse_a_real_chat_completion() {
    let provider = provider("http://127.0.0.1:9/v1".into(), CredentialLocation::None);
    let body = json!({
        "id": "chatcmpl-AbC123", "object": "chat.completion", "created": 1_735_775_425,
        "model": "gpt-4o-mini-2024-07-18", "system_fingerprint": "fp_0ba0d124f1",
        "choices": [{"index": 0, "logprobs": null, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "Paris.", "refusal": null, "annotations": []}}],
        "usage": {"prompt_tokens": 13, "completion_tokens": 2, "total_tokens": 15,
                  "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
        "service_tier": "batch"
    });
    let answer = provider.chat_answer(&body).unwrap();
    assert_eq!(answer.id, "chatcmpl-AbC123");
    assert_eq!(
        answer.choices[0].content,
        [ContentBlock::Text { text: "Paris.".into() }]
    );
    assert_eq!((answer.usage.input_tokens, answer.usage.output_tokens), (13, 2));
    assert_eq!(answer.system_fingerprint.as_deref(), Some("fp_0ba0d124f1"));
    assert_eq!(answer.raw_response, Some(body.to_string()));
    let err = provider.chat_answer(&json!({"object": "list"})).unwrap_err();
    assert!(matches!(err, ProviderError::InvalidResponse(_)), "{err:?}");
}
