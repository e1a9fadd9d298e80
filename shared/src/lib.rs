//! Nimbus core library: OpenAI wire types, configuration, model providers and routing, auth, the
//! HTTP router shared by every host, and the ports (traits) with their AWS and embedded adapters.

pub mod adapters;
pub mod app;
pub mod async_requests;
pub mod auth;
pub(crate) mod backoff;
pub mod batches;
pub mod config;
pub mod files;
pub mod http;
pub mod idempotency;
pub mod inference;
pub mod jobs;
pub(crate) mod json_size;
pub(crate) mod jsonl;
pub mod lmi_api;
mod mac;
pub mod model;
pub mod model_slots;
pub mod openai;
pub mod paging;
pub mod ports;
pub mod providers;
pub mod records;
pub mod scheduler;
pub mod schema_limits;
pub mod surface_errors;
pub mod telemetry;
pub mod tensorzero;
pub mod user_text;
pub mod webhooks;
