//! The router against hostile input, in process: ids that are not UTF-8, repeated query
//! parameters, poisoned `Host` headers, oversized values; every answer is a small JSON envelope.

use super::tests::{local_in, PUBLIC_URL};
use super::*;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};
use tower::ServiceExt;

struct Answer {
    status: StatusCode,
    content_type: String,
    body: Value,
    size: usize,
}

impl Answer {
    fn error(&self) -> &Value {
        &self.body["error"]
    }
}

async fn send(router: &Router, request: Request<Body>) -> Answer {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Answer {
        status,
        content_type,
        body,
        size: bytes.len(),
    }
}

fn request(method: &str, uri: &str, body: Body) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(body)
        .unwrap()
}

/// Every route with a path parameter, with `{id}` to fill in.
const ROUTES_WITH_IDS: [(&str, &str, &str); 10] = [
    ("GET", "/v1/files/{id}", "id"),
    ("DELETE", "/v1/files/{id}", "id"),
    ("GET", "/v1/files/{id}/content", "id"),
    ("PUT", "/v1/files/{id}/content", "id"),
    ("GET", "/v1/batches/{id}", "id"),
    ("POST", "/v1/batches/{id}/cancel", "id"),
    ("POST", "/v1/uploads/{id}/parts", "id"),
    ("POST", "/v1/uploads/{id}/complete", "id"),
    ("POST", "/v1/uploads/{id}/cancel", "id"),
    ("GET", "/v1/models/{id}", "model"),
];

#[tokio::test]
async fn ids_that_are_not_utf8_get_an_envelope_naming_the_parameter() {
    let dir = tempfile::tempdir().unwrap();
    let router = local_in(dir.path());
    for (method, route, param) in ROUTES_WITH_IDS {
        let uri = route.replace("{id}", "%FF%FE%FD");
        let answer = send(&router, request(method, &uri, Body::from("{}"))).await;
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{method} {uri}: {:?}",
            answer.body
        );
        assert_eq!(answer.content_type, "application/json", "{method} {uri}");
        assert_eq!(answer.error()["param"], param, "{method} {uri}: {:?}", answer.body);
        let message = answer.error()["message"].as_str().unwrap();
        assert!(message.contains("UTF-8"), "{method} {uri}: {message}");
    }
}

#[tokio::test]
async fn repeated_query_parameters_get_an_envelope_naming_the_parameter() {
    let dir = tempfile::tempdir().unwrap();
    let router = local_in(dir.path());
    for path in ["/v1/files", "/v1/batches"] {
        for query in ["limit=1&limit=2", "after=a&after=b"] {
            let uri = format!("{path}?{query}");
            let answer = send(&router, request("GET", &uri, Body::empty())).await;
            assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{uri}: {:?}", answer.body);
            assert_eq!(answer.content_type, "application/json", "{uri}");
            let name = query.split('=').next().unwrap();
            assert_eq!(answer.error()["param"], name, "{uri}: {:?}", answer.body);
        }
        let answer = send(&router, request("GET", &format!("{path}?limit=2"), Body::empty())).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {:?}", answer.body);
    }
}

#[tokio::test]
async fn unknown_routes_and_methods_keep_the_envelope_and_quote_short() {
    let dir = tempfile::tempdir().unwrap();
    let router = local_in(dir.path());
    let long_path = format!("/v1/{}", "p".repeat(60_000));
    for (method, uri, status) in [
        ("GET", "/v1/nope", StatusCode::NOT_FOUND),
        ("GET", long_path.as_str(), StatusCode::NOT_FOUND),
        ("PATCH", "/v1/files", StatusCode::METHOD_NOT_ALLOWED),
        ("DELETE", "/v1/chat/completions", StatusCode::METHOD_NOT_ALLOWED),
    ] {
        let answer = send(&router, request(method, uri, Body::empty())).await;
        assert_eq!(answer.status, status, "{method} {}", &uri[..20.min(uri.len())]);
        assert_eq!(answer.content_type, "application/json");
        assert!(answer.size < 1024, "{}", answer.size);
    }
}

#[tokio::test]
async fn a_plain_text_error_from_anywhere_becomes_an_envelope() {
    let router = with_common_layers(Router::new().route(
        "/plain",
        axum::routing::get(|| async { (StatusCode::UNPROCESSABLE_ENTITY, "Failed to parse something") }),
    ));
    let answer = send(&router, request("GET", "/plain", Body::empty())).await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(answer.content_type, "application/json");
    let message = answer.error()["message"].as_str().unwrap();
    assert!(message.contains("Failed to parse"), "{message}");
    assert_eq!(answer.error()["type"], "invalid_request_error");
}

#[tokio::test]
async fn a_poisoned_host_is_refused_and_upload_urls_use_the_public_url() {
    let dir = tempfile::tempdir().unwrap();
    let router = local_in(dir.path());
    let body = json!({"filename": "a.jsonl", "purpose": "batch", "bytes": 10}).to_string();
    for host in ["evil.example:443/steal?x=", "user@evil.example", "evil.example:99999"] {
        let mut poisoned = request("POST", "/v1/direct_uploads", Body::from(body.clone()));
        poisoned.headers_mut().insert("host", host.parse().unwrap());
        let answer = send(&router, poisoned).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{host}: {:?}", answer.body);
        assert_eq!(answer.error()["param"], "Host", "{host}");
        assert!(!answer.body.to_string().contains("evil"), "{host}: {:?}", answer.body);
    }
    let mut other_host = request("POST", "/v1/direct_uploads", Body::from(body));
    other_host
        .headers_mut()
        .insert("host", "other.example:8080".parse().unwrap());
    let answer = send(&router, other_host).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    let id = answer.body["file"]["id"].as_str().unwrap();
    assert_eq!(answer.body["upload_url"], format!("{PUBLIC_URL}/v1/files/{id}/content"));
}

/// The fields the issue names, each 1 MB: the answer names the field and stays small.
#[tokio::test]
async fn oversized_values_are_quoted_as_a_short_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let router = local_in(dir.path());
    let huge = "v".repeat(1024 * 1024);
    let chat = |extra: Value| {
        let mut body = json!({"model": "dummy", "messages": [{"role": "user", "content": "hi"}]});
        for (key, value) in extra.as_object().unwrap() {
            body[key] = value.clone();
        }
        body
    };
    let batch = |extra: Value| {
        let mut body =
            json!({"input_file_id": "file-x", "endpoint": "/v1/chat/completions", "completion_window": "24h"});
        for (key, value) in extra.as_object().unwrap() {
            body[key] = value.clone();
        }
        body
    };
    let cases = [
        ("/v1/chat/completions", chat(json!({"model": huge})), "model"),
        ("/v1/embeddings", json!({"model": huge, "input": "hi"}), "model"),
        (
            "/v1/chat/completions",
            chat(json!({
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": huge}}
            })),
            "tool_choice",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"temperature": huge})),
            "temperature",
        ),
        (
            "/v1/batches",
            batch(json!({"completion_window": huge})),
            "completion_window",
        ),
        ("/v1/batches", batch(json!({"endpoint": huge})), "endpoint"),
        ("/v1/batches", batch(json!({"input_file_id": huge})), "input_file_id"),
        (
            "/v1/batches",
            batch(json!({"metadata": {huge.clone(): "v"}})),
            "metadata",
        ),
        (
            "/v1/uploads",
            json!({"filename": "a", "purpose": huge, "bytes": 1, "mime_type": "text/plain"}),
            "purpose",
        ),
        (
            "/v1/direct_uploads",
            json!({"filename": "a", "purpose": huge, "bytes": 1}),
            "purpose",
        ),
    ];
    for (path, body, param) in cases {
        let answer = send(&router, request("POST", path, Body::from(body.to_string()))).await;
        assert!(answer.status.is_client_error(), "{path} {param}: {}", answer.status);
        assert!(answer.size < 4096, "{path} {param}: {} bytes", answer.size);
        assert_eq!(answer.error()["param"], param, "{path}: {:?}", answer.body);
    }
}

fn multipart(fields: &[(&str, &[u8], Option<&str>)]) -> Request<Body> {
    let boundary = "nimbus-test-boundary";
    let mut body = Vec::new();
    for (name, value, filename) in fields {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        match filename {
            Some(filename) => body.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\n\r\n").as_bytes(),
            ),
            None => {
                body.extend_from_slice(format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes())
            }
        }
        body.extend_from_slice(value);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    Request::builder()
        .method("POST")
        .uri("/v1/files")
        .header("content-type", format!("multipart/form-data; boundary={boundary}"))
        .body(Body::from(body))
        .unwrap()
}

#[tokio::test]
async fn multipart_text_fields_are_capped() {
    let dir = tempfile::tempdir().unwrap();
    let router = local_in(dir.path());
    let huge = vec![b'p'; 7 * 1024 * 1024];
    for name in [
        "purpose",
        "expires_after[anchor]",
        "expires_after[seconds]",
        "something_else",
    ] {
        let request = multipart(&[(name, &huge, None), ("file", b"{}", Some("a.jsonl"))]);
        let answer = send(&router, request).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{name}: {:?}", answer.body);
        assert!(answer.size < 4096, "{name}: {} bytes", answer.size);
        assert_eq!(answer.error()["param"], name, "{name}: {:?}", answer.body);
    }
    let request = multipart(&[("purpose", &huge[..100_000], None)]);
    let answer = send(&router, request).await;
    assert_eq!(answer.error()["param"], "purpose", "{:?}", answer.body);
    let request = multipart(&[("purpose", b"user_data", None), ("file", b"hello", Some("a.txt"))]);
    assert_eq!(send(&router, request).await.status, StatusCode::OK);
}
