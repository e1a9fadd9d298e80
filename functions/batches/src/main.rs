//! The batches Lambda: wires AWS adapters and serves the shared batches router (`/v1/batches`:
//! create, list, retrieve, cancel) through `lambda_http`. The work itself is done by the queue
//! worker (`nimbus-worker`) and the scheduled poller (`nimbus-poller`).

use nimbus_shared::app::lambda;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    lambda::prepare_function("nimbus-batches");
    let function = lambda::batches_function().await.map_err(lambda_http::Error::from)?;
    function.run().await
}
