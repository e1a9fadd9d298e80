//! The OpenAPI 3.1 document built from the routes (with the `openapi` feature): what
//! `nimbus openapi` prints into `docs/openapi.json`, the copy every host serves.

use super::baseten_error::BasetenErrorBody;
use super::lmi_error::LmiErrorBody;
use super::tensorzero_error::TensorZeroErrorBody;
use crate::openai::error::ErrorEnvelope;
use std::sync::OnceLock;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::OpenApi as Document;
use utoipa::{Modify, OpenApi};

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

/// The whole document: the fixed parts and every route's operation.
pub fn document() -> Document {
    let mut document = Fixed::openapi();
    document.merge(super::every_route());
    document.info.version = env!("CARGO_PKG_VERSION").to_owned();
    document
}

/// The document as pretty-printed JSON, built once.
pub fn document_json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| document().to_pretty_json().unwrap_or_else(|_| "{}".to_owned()))
}
