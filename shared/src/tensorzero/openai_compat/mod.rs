//! TensorZero's OpenAI-compatible surface (`/openai/v1/chat/completions`): an OpenAI chat body
//! whose `model` is `tensorzero::function_name::F` or `tensorzero::model_name::M` runs through the
//! function layer, and the answer comes back as an OpenAI completion (plus `episode_id`).

mod reply;
mod request;

pub(crate) use reply::{completion_of, CompletionChunker};
pub(crate) use request::{inference_request_of, EMBEDDING_MODEL_PREFIX, MODEL_PREFIX};
