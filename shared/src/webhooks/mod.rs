//! Outgoing webhooks: signing secrets and signatures (Standard Webhooks, Baseten) and one delivery
//! with its retry schedule; a project's webhook secrets (`secrets`), its batch event endpoints
//! (`endpoints`) and the batch events delivered to them (`events`, `event_delivery_jobs`). The URL
//! policy that keeps webhooks off internal addresses is the transport port's (`ports::webhook_url`).

pub mod delivery;
pub mod endpoints;
mod errors;
mod event_delivery_jobs;
pub mod events;
mod sealed_secret;
pub mod secrets;
pub mod signing;
#[cfg(test)]
mod test_support;

pub use crate::ports::webhook_url::{forbidden_address, UrlPolicy, WebhookUrl, WebhookUrlError};
pub use delivery::{Delivery, DeliveryAttempt, DeliveryState, SignatureStyle};
pub use endpoints::{
    BatchEventType, CreateEndpointRequest, CreatedEndpoint, DeletedEndpoint, EndpointList, WebhookEndpoint,
    WebhookEndpoints, WEBHOOK_PAGE,
};
pub use errors::WebhooksError;
pub use events::{BatchWebhooks, BatchWebhooksDeps, DeliveryList, DeliveryView};
pub use secrets::{CreatedSecret, RevokedSecret, SecretSource, SecretSummary, WebhookSecrets};
pub use signing::{baseten_signature, standard_signature, SecretFormatError, SigningSecret};
