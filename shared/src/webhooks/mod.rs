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

pub use crate::ports::webhook_url::{UrlPolicy, WebhookUrl};
pub use endpoints::{BatchEventType, CreateEndpointRequest, WebhookEndpoints};
pub(crate) use endpoints::{CreatedEndpoint, DeletedEndpoint, EndpointList, WebhookEndpoint, WEBHOOK_PAGE};
pub(crate) use errors::WebhooksError;
pub(crate) use events::{BatchWebhooks, BatchWebhooksDeps, DeliveryList};
pub(crate) use secrets::{CreatedSecret, RevokedSecret, SecretSummary};
pub use secrets::{SecretSource, WebhookSecrets};
pub use signing::{standard_signature, SigningSecret};
