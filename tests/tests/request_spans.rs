//! Every line a request logs carries its request id, its project and the id of the resource its
//! route names, so one batch's or file's lines can be filtered, from its HTTP requests to its jobs
//! (see job_spans.rs). Its own test binary: tracing's call-site cache is process-wide, and tests
//! without a subscriber running beside this one could hide the span.

use nimbus_integration_tests::local_gateway::open_state;
use nimbus_integration_tests::log_capture::Lines;
use nimbus_shared::app::{embedded, LoadedConfig};
use nimbus_shared::config::Config;
use nimbus_shared::http::local_router;

#[tokio::test]
async fn a_requests_log_lines_carry_its_request_id_project_and_resource_id() {
    let (lines, _guard) = Lines::capture(tracing::Level::DEBUG);

    let data_dir = tempfile::tempdir().unwrap();
    let loaded = LoadedConfig::without_files(Config::from_toml("").unwrap()).unwrap();
    let adapters = embedded::adapters(data_dir.path()).unwrap();
    let state = open_state(&loaded, &adapters);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, local_router(state)).await.unwrap() });
    let response = reqwest::Client::new()
        .post(format!("http://{address}/v1/batches/batch_0192f0c5/cancel"))
        .header("x-request-id", "req-7")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    server.abort();

    let finished = lines.with_message("finished processing request");
    let text = lines.text();
    let span = &finished["span"];
    assert_eq!(span["name"], "request", "{text}");
    assert_eq!(span["request_id"], "req-7");
    assert_eq!(span["resource_id"], "batch_0192f0c5", "{text}");
    assert!(span["project"].is_string(), "{text}");
}
