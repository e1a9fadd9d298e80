//! The OpenAPI 3.1 document of the whole HTTP surface. Each handler carries its own operation
//! (`#[utoipa::path]`, registered with its route by `utoipa_axum::routes!`), so the document is
//! built from the same route lists the hosts serve; schemas are derived from the handlers' types.
//! Served at `GET /openapi.json`; `docs/openapi.json` is the checked-in copy.

use super::baseten_error::BasetenErrorBody;
use super::lmi_error::LmiErrorBody;
use super::tensorzero_error::TensorZeroErrorBody;
use crate::openai::error::ErrorEnvelope;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use std::sync::OnceLock;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::OpenApi as Document;
use utoipa::{IntoResponses, Modify, OpenApi};

/// The document's fixed parts: what Nimbus is, the API key scheme, the tags.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Nimbus",
        description = "A serverless LLM inference gateway: OpenAI-compatible chat, embeddings, files, \
            uploads and batches; TensorZero-style functions, batch inference and records; Baseten-style \
            async inference with webhooks; the DJL Serving (LMI) API.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    modifiers(&ApiKeyAuth),
    security(("api_key" = [])),
    tags(
        (name = "openai", description = "OpenAI-compatible chat completions, embeddings and models"),
        (name = "files", description = "OpenAI-compatible files, uploads and direct uploads"),
        (name = "batches", description = "OpenAI-compatible batches"),
        (name = "tensorzero", description = "TensorZero-style functions, batch inference, records and feedback"),
        (name = "async", description = "Baseten-style async inference"),
        (name = "webhooks", description = "Webhook signing secrets and endpoints"),
        (name = "lmi", description = "The DJL Serving (LMI) API"),
        (name = "operations", description = "Health, metrics and this document"),
    ),
    components(schemas(ErrorEnvelope, TensorZeroErrorBody, BasetenErrorBody, LmiErrorBody)),
)]
struct Fixed;

/// `Authorization: Bearer <key>` (a gateway API key; a local server without keys accepts any).
struct ApiKeyAuth;

impl Modify for ApiKeyAuth {
    fn modify(&self, openapi: &mut Document) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let scheme = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build();
        components.add_security_scheme("api_key", SecurityScheme::Http(scheme));
    }
}

/// The errors of the OpenAI-compatible routes.
#[derive(IntoResponses)]
pub enum OpenAiErrors {
    /// The request was refused: bad input (`param` names the field), a missing or bad API key,
    /// something not found, a body too large, a rate limit.
    #[response(status = "4XX")]
    Refused(ErrorEnvelope),
    /// The gateway or every provider failed; `x-should-retry: false` when the gateway already
    /// retried.
    #[response(status = "5XX")]
    Failed(ErrorEnvelope),
}

/// The errors of TensorZero's routes.
#[derive(IntoResponses)]
pub enum TensorZeroErrors {
    /// The request was refused (bad input names the field in the message).
    #[response(status = "4XX")]
    Refused(TensorZeroErrorBody),
    /// The gateway or the model failed.
    #[response(status = "5XX")]
    Failed(TensorZeroErrorBody),
}

/// The errors of the Baseten-style async routes.
#[derive(IntoResponses)]
pub enum BasetenErrors {
    /// The request was refused; a 400 names the `field`.
    #[response(status = "4XX")]
    Refused(BasetenErrorBody),
    /// Storage failed; try again.
    #[response(status = "5XX")]
    Failed(BasetenErrorBody),
}

/// The errors of the LMI API (bad input is a 424, as DJL Serving answers it).
#[derive(IntoResponses)]
pub enum LmiErrors {
    #[response(status = "4XX")]
    Refused(LmiErrorBody),
    #[response(status = "5XX")]
    Failed(LmiErrorBody),
}

/// The whole document: the fixed parts and every route's operation.
pub fn document() -> Document {
    let mut document = Fixed::openapi();
    document.merge(super::every_route().into_openapi());
    document.info.version = env!("CARGO_PKG_VERSION").to_owned();
    document
}

/// The document as pretty-printed JSON, built once.
pub fn document_json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| document().to_pretty_json().unwrap_or_else(|_| "{}".to_owned()))
}

/// `GET /openapi.json`.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    security(()),
    responses((status = 200, description = "This document (OpenAPI 3.1)", content_type = "application/json", body = Object))
)]
pub(super) async fn openapi_json() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], document_json()).into_response()
}
