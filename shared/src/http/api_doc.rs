//! The OpenAPI 3.1 document of the whole HTTP surface. Each handler carries its own operation
//! (`#[utoipa::path]`, registered with its route by `utoipa_axum::routes!`), so the document is
//! built from the same route lists the hosts serve; schemas are derived from the handlers' types.
//! Served at `GET /openapi.json`; `docs/openapi.json` is the checked-in copy.

use super::baseten_error::BasetenErrorBody;
use super::lmi_error::LmiErrorBody;
use super::tensorzero_error::TensorZeroErrorBody;
use crate::openai::error::ErrorEnvelope;
use axum::http::header;
use axum::response::IntoResponse;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::OnceLock;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi as Document, Ref, RefOr, Response, ResponseBuilder, ResponsesBuilder};
use utoipa::{IntoResponses, Modify, OpenApi, ToSchema};

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

/// A surface's error responses: any 4XX or 5XX, its body that surface's error shape `T`.
pub struct ErrorResponses<T>(PhantomData<T>);

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
pub type OpenAiErrors = ErrorResponses<ErrorEnvelope>;
/// TensorZero's routes' errors: `{"error": "<message>"}`.
pub type TensorZeroErrors = ErrorResponses<TensorZeroErrorBody>;
/// The Baseten-style async routes' errors: `{"error", "code", "field"}`.
pub type BasetenErrors = ErrorResponses<BasetenErrorBody>;
/// The LMI API's errors (bad input is a 424, as DJL Serving answers it).
pub type LmiErrors = ErrorResponses<LmiErrorBody>;

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
pub(super) async fn openapi_json() -> axum::response::Response {
    ([(header::CONTENT_TYPE, "application/json")], document_json()).into_response()
}
