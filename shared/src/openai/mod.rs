//! OpenAI wire types: what clients send and receive on `/v1/*`.

pub mod batches;
pub mod chat;
pub mod chat_body;
pub mod embeddings;
pub mod files;
pub mod from_model;
pub mod metadata;
pub mod models;
pub mod to_model;
