//! The inference Lambda: wires AWS adapters and serves the shared router through `lambda_http`
//! (API Gateway HTTP API v2, REST API v1, ALB and function URL events).

use nimbus_shared::app::lambda;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    lambda::prepare_function("nimbus-inference");
    let router = lambda::inference_router().await.map_err(lambda_http::Error::from)?;
    lambda_http::run(router).await
}
