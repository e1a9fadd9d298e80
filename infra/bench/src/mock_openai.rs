//! `nimbus-mock-openai`: a zero-latency OpenAI-compatible upstream for the gateway benchmarks.
//!
//! `POST /v1/chat/completions` reads the request body and answers at once with one fixed, small,
//! valid `chat.completion`; nothing is parsed, logged or allocated per request beyond what hyper
//! needs, so the baseline measured against it is as close to "the network stack alone" as an
//! axum server gets.

mod mock_server;

use axum::body::Bytes;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use clap::Parser;
use std::net::{IpAddr, SocketAddr};

#[derive(Parser)]
#[command(
    name = "nimbus-mock-openai",
    about = "Zero-latency OpenAI-compatible upstream for benchmarks"
)]
struct Args {
    /// Port to listen on (0 picks a free one; the chosen address is printed on stderr).
    #[arg(long, env = "PORT", default_value_t = 8090)]
    port: u16,
    /// Address to bind.
    #[arg(long, env = "MOCK_BIND", default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Tokio worker threads (default: one per available core).
    #[arg(long, env = "MOCK_WORKER_THREADS")]
    worker_threads: Option<usize>,
}

/// The one answer, byte for byte what an OpenAI-compatible server returns for a tiny completion.
const CHAT_COMPLETION: &str = concat!(
    r#"{"id":"chatcmpl-mock","object":"chat.completion","created":1735689600,"model":"mock-model","#,
    r#""choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the mock."},"#,
    r#""logprobs":null,"finish_reason":"stop"}],"#,
    r#""usage":{"prompt_tokens":9,"completion_tokens":5,"total_tokens":14}}"#
);

async fn chat_completions(_body: Bytes) -> impl IntoResponse {
    ([(CONTENT_TYPE, "application/json")], CHAT_COMPLETION)
}

async fn health() -> &'static str {
    "ok"
}

fn router() -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/health", get(health))
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let address = SocketAddr::new(args.bind, args.port);
    mock_server::run(args.worker_threads, address, router(), |local| {
        eprintln!("nimbus-mock-openai listening on http://{local}/v1");
        Ok(())
    })
}
