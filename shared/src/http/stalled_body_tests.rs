//! Stalled request bodies over real sockets (issue #26 C8): two clients that declare 9 MB, send
//! 17 bytes and stop must neither hold the large-body budget nor be waited for forever.

use super::body_deadline::BodyTimeouts;
use super::tests::{adapters, state_with};
use super::*;
use crate::auth::AuthMode;
use serde_json::json;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// Long enough that a loaded machine answers the well-formed requests well within it.
const IDLE: Duration = Duration::from_secs(5);

async fn serve(dir: &std::path::Path) -> SocketAddr {
    let router = local_router_with(
        state_with(&adapters(dir), AuthMode::OpenWhenNoKeys),
        BodyTimeouts {
            idle: IDLE,
            total: Duration::from_secs(60),
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    address
}

/// A connection that declares a 9 MB JSON body, sends 17 bytes of it and stops.
async fn stalled(address: SocketAddr, path: &str) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: 9437184\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(br#"{"model": "dummy"#).await.unwrap();
    stream
}

/// The status line of the answer on `stream`, if one comes within `wait`.
async fn status_line(stream: &mut TcpStream, wait: Duration) -> Option<String> {
    let mut answer = vec![0u8; 4096];
    let read = tokio::time::timeout(wait, stream.read(&mut answer)).await.ok()?.ok()?;
    let text = String::from_utf8_lossy(&answer[..read]).into_owned();
    text.lines().next().map(str::to_owned)
}

#[tokio::test]
async fn stalled_bodies_time_out_and_hold_no_budget_from_others() {
    let dir = tempfile::tempdir().unwrap();
    let address = serve(dir.path()).await;
    let started = Instant::now();
    let mut first = stalled(address, "/v1/chat/completions").await;
    let mut second = stalled(address, "/v1/batches").await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Well-formed large requests are answered promptly while both stall.
    let client = reqwest::Client::new();
    for padding in [621 * 1024, 300 * 1024] {
        let body = json!({"model": "dummy", "messages": [{"role": "user", "content": "x".repeat(padding)}]});
        let response = client
            .post(format!("http://{address}/v1/chat/completions"))
            .json(&body)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap_or_default());
    }
    // Answered while both still stall: had they held the budget, these requests would have waited
    // for the stalled ones' 408 (IDLE after they began), and the 408 would be waiting below. (No
    // wall-clock bound on the answers themselves: a loaded machine may take its time.)
    assert_eq!(
        status_line(&mut first, Duration::ZERO).await,
        None,
        "still stalled, no answer yet"
    );

    // Each stalled body ends in 408 once it has been idle for IDLE, and no later.
    for stream in [&mut first, &mut second] {
        let line = status_line(stream, IDLE * 2).await;
        assert_eq!(line.as_deref(), Some("HTTP/1.1 408 Request Timeout"));
    }
    let took = started.elapsed();
    assert!(
        took >= IDLE && took < IDLE + Duration::from_secs(20),
        "the stalled bodies took {took:?}"
    );
}
