//! `nimbus-hello-lambda`: the smallest useful `lambda_runtime` function, built with the same release
//! profile as the real functions. It is the yardstick for the cold-start comparison: whatever
//! `nimbus-inference` spends beyond this at init is Nimbus's own cost.

use lambda_runtime::{service_fn, Error, LambdaEvent};
use serde_json::{json, Value};

async fn handler(_event: LambdaEvent<Value>) -> Result<Value, Error> {
    Ok(json!({
        "statusCode": 200,
        "headers": {"content-type": "application/json"},
        "body": "{\"status\":\"ok\"}"
    }))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::run(service_fn(handler)).await
}
