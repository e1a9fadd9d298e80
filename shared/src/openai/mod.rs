//! The OpenAI wire surface: what clients send and receive on `/v1/*`, its error envelope, and
//! request bodies read with precise errors. Used by the HTTP routes and the batch engine alike.

pub mod batches;
pub mod chat;
pub mod chat_body;
pub mod credentials;
pub mod embeddings;
pub mod error;
pub mod files;
pub mod from_model;
pub(crate) mod json_body;
pub mod metadata;
pub mod models;
pub(crate) mod to_model;
