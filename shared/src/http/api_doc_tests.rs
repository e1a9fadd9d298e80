//! The OpenAPI document: the checked-in copy is current, and it names exactly the routes the
//! local server serves.

use super::openapi_document::{document, document_json};
use super::tests::local_in;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

#[test]
fn the_checked_in_document_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in.trim_end() == document_json().trim_end(),
        "docs/openapi.json is stale: run `make openapi`"
    );
}

#[test]
fn the_document_is_openapi_3_1_with_every_error_shape() {
    let document: serde_json::Value = serde_json::from_str(document_json()).unwrap();
    assert!(
        document["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        document["openapi"]
    );
    let schemas = &document["components"]["schemas"];
    for shape in ["OpenAiError", "TensorZeroError", "BasetenError", "LmiError"] {
        assert!(schemas[shape].is_object(), "{shape} missing");
    }
    let error_of = |path: &str, method: &str| {
        document["paths"][path][method]["responses"]["4XX"]["content"]["application/json"]["schema"]["$ref"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(
        error_of("/v1/chat/completions", "post"),
        "#/components/schemas/OpenAiError"
    );
    assert_eq!(error_of("/inference", "post"), "#/components/schemas/TensorZeroError");
    assert_eq!(error_of("/async_predict", "post"), "#/components/schemas/BasetenError");
    assert_eq!(error_of("/invocations", "post"), "#/components/schemas/LmiError");
}

/// Every documented operation reaches a handler of the local server (no "unknown URL", no 405),
/// and the document has every route a handler serves: a route missing from it would have to be
/// registered outside `routes!`, which only the two wildcard routes are (documented by hand).
#[tokio::test]
async fn every_documented_operation_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let router = local_in(dir.path());
    let document = document();
    let mut operations = 0;
    for (path, item) in &document.paths.paths {
        let concrete = path
            .replace("{model}", "dummy")
            .replace("{id}", "x")
            .replace("{request_id}", "x")
            .replace("{inference_id}", "0190f0a4-0000-7000-8000-000000000000")
            .replace("{episode_id}", "0190f0a4-0000-7000-8000-000000000000")
            .replace("{batch_id}", "0190f0a4-0000-7000-8000-000000000000")
            .replace("{function_name}", "draft_email");
        assert!(!concrete.contains('{'), "{path}: an unknown path parameter");
        let methods = [
            ("GET", &item.get),
            ("POST", &item.post),
            ("PUT", &item.put),
            ("DELETE", &item.delete),
        ];
        for (method, operation) in methods {
            if operation.is_none() {
                continue;
            }
            operations += 1;
            let request = Request::builder()
                .method(method)
                .uri(&concrete)
                .header("content-type", "application/json")
                .body(Body::from("{}"))
                .unwrap();
            let response = router.clone().oneshot(request).await.unwrap();
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
            let text = String::from_utf8_lossy(&body);
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}: {text}");
            assert!(!text.contains("Unknown request URL"), "{method} {path}: {text}");
        }
    }
    assert!(operations >= 50, "only {operations} operations documented");
}
