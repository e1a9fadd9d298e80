//! The JSON body extractor: a body read within the memory budget, parsed by
//! [`parse_json_body`] (precise 400s naming the parameter).

use super::body_budget::{read_within_budget, BodyPermit, BodyReadError};
use super::error::ApiError;
use crate::openai::json_body::parse_json_body;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// The typed body and the raw JSON object it was read from.
pub(crate) struct JsonBody<T> {
    pub typed: T,
    pub raw: Map<String, Value>,
    /// A large body's share of the memory budget, held as long as the body is.
    _budget: BodyPermit,
}

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let declared = request
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        // The route's own body limit (`DefaultBodyLimit`) applies, as it does for axum's extractors.
        let body = axum::RequestExt::with_limited_body(request).into_body();
        let (bytes, budget) = read_within_budget(body, declared, super::MAX_JSON_BODY_BYTES)
            .await
            .map_err(|err| match err {
                BodyReadError::TooLarge(_) => ApiError::payload_too_large("The request body is too large."),
                BodyReadError::Busy => {
                    let mut error = ApiError::internal(err.to_string()).with_code("server_busy");
                    error.status = axum::http::StatusCode::SERVICE_UNAVAILABLE;
                    error
                }
                BodyReadError::Read(read) => {
                    ApiError::invalid_request(format!("Could not read the request body: {read}"))
                }
            })?;
        let parsed = parse_json_body(&bytes)?;
        Ok(JsonBody {
            typed: parsed.typed,
            raw: parsed.raw,
            _budget: budget,
        })
    }
}
