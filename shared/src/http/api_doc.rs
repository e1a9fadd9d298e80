//! The OpenAPI 3.1 document of the whole HTTP surface, served at `GET /openapi.json`, and the
//! error responses each surface's operations declare. Each handler carries its own operation
//! (`#[utoipa::path]`, registered with its route by `routes!`), so the document is built from the
//! same route lists the hosts serve (`super::openapi_document`); `docs/openapi.json` is the
//! checked-in copy.

use super::baseten_error::BasetenErrorBody;
use super::lmi_error::LmiErrorBody;
use super::tensorzero_error::TensorZeroErrorBody;
use crate::openai::error::ErrorEnvelope;
use axum::http::header;
use axum::response::IntoResponse;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder, ResponsesBuilder};
use utoipa::{IntoResponses, ToSchema};

/// A surface's error responses: any 4XX or 5XX, its body that surface's error shape `T`.
pub(crate) struct ErrorResponses<T>(PhantomData<T>);

impl<T: ToSchema> IntoResponses for ErrorResponses<T> {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        let response = |description: &str| {
            let body = ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(T::name())))
                .build();
            ResponseBuilder::new()
                .description(description)
                .content("application/json", body)
                .build()
        };
        ResponsesBuilder::new()
            .response(
                "4XX",
                response("The request was refused: bad input (naming the field), a missing or bad API key, something not found, a body too large."),
            )
            .response("5XX", response("The gateway, its storage or every provider failed."))
            .build()
            .responses
    }
}

/// The OpenAI-compatible routes' errors: `{"error": {"message", "type", "param", "code"}}`.
pub(crate) type OpenAiErrors = ErrorResponses<ErrorEnvelope>;
/// TensorZero's routes' errors: `{"error": "<message>"}`.
pub(crate) type TensorZeroErrors = ErrorResponses<TensorZeroErrorBody>;
/// The Baseten-style async routes' errors: `{"error", "code", "field"}`.
pub(crate) type BasetenErrors = ErrorResponses<BasetenErrorBody>;
/// The LMI API's errors (bad input is a 424, as DJL Serving answers it).
pub(crate) type LmiErrors = ErrorResponses<LmiErrorBody>;

/// The checked-in document (`docs/openapi.json`, kept current by `make openapi` and checked by
/// `the_checked_in_document_is_current`): what `GET /openapi.json` serves.
const CHECKED_IN: &str = include_str!("../../../docs/openapi.json");

/// `GET /openapi.json`.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    security(()),
    responses((status = 200, description = "This document (OpenAPI 3.1)", content_type = "application/json", body = Object))
)]
pub(super) async fn openapi_json() -> axum::response::Response {
    ([(header::CONTENT_TYPE, "application/json")], CHECKED_IN).into_response()
}
