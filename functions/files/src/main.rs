//! The files Lambda: wires AWS adapters and serves the shared files router (`/v1/files`,
//! `/v1/uploads`, `/v1/direct_uploads`) through `lambda_http`.

use nimbus_shared::app::lambda;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    lambda::prepare_function("nimbus-files");
    let function = lambda::files_function().await.map_err(lambda_http::Error::from)?;
    function.run().await
}
