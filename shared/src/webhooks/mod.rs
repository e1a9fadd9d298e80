//! Outgoing webhooks: signing secrets and signatures (Standard Webhooks, Baseten), the URL policy
//! that keeps webhooks off internal addresses, and one delivery with its retry schedule.

pub mod delivery;
pub mod signing;
pub mod url_policy;

pub use delivery::{Delivery, DeliveryAttempt, DeliveryState, SignatureStyle};
pub use signing::{baseten_signature, standard_signature, SecretFormatError, SigningSecret};
pub use url_policy::{forbidden_address, UrlPolicy, WebhookUrl, WebhookUrlError};
