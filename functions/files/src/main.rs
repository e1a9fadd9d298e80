//! The files Lambda: wires AWS adapters and serves the shared files router (`/v1/files`,
//! `/v1/uploads`, `/v1/direct_uploads`) through `lambda_http`.

use nimbus_shared::telemetry::{init, LogFormat};

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    init(LogFormat::from_env());
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_none() {
        eprintln!(
            "nimbus-files runs inside AWS Lambda (or the runtime interface emulator); for local use run `make run`"
        );
        std::process::exit(2);
    }
    let router = nimbus_shared::app::lambda::files_router().await.map_err(|message| {
        tracing::error!(%message, "init failed");
        lambda_http::Error::from(message)
    })?;
    lambda_http::run(router).await
}
