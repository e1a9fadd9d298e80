//! The inference Lambda: wires AWS adapters and serves the shared router through `lambda_http`
//! (API Gateway HTTP API v2, REST API v1, ALB and function URL events).

use nimbus_shared::telemetry::{init, LogFormat};

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    init(LogFormat::from_env());
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_none() {
        eprintln!(
            "nimbus-inference runs inside AWS Lambda (or the runtime interface emulator); for local use run `make run`"
        );
        std::process::exit(2);
    }
    let router = nimbus_shared::app::lambda::inference_router()
        .await
        .map_err(|message| {
            tracing::error!(%message, "init failed");
            lambda_http::Error::from(message)
        })?;
    lambda_http::run(router).await
}
