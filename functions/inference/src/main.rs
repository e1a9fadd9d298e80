//! The inference Lambda: wires AWS adapters and serves the shared router through `lambda_http`
//! (API Gateway HTTP API v2, REST API v1 and ALB events answered whole; function URL events
//! streamed, for real-time SSE).

use nimbus_shared::app::lambda;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    lambda::prepare_function("nimbus-inference");
    let function = lambda::inference_function().await.map_err(lambda_http::Error::from)?;
    function.run().await
}
