//! OpenAI wire types: what clients send and receive on `/v1/*`.

pub mod batches;
pub mod chat;
pub mod embeddings;
pub mod files;
pub mod metadata;
pub mod models;
