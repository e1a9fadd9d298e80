//! TensorZero-style `/inference`: the request, its checks, variant choice with fallback,
//! templates, tools, json mode, and the function's output (whole or streamed).

mod batch_item;
mod checks;
mod episode;
mod error;
pub mod input;
mod model_call;
mod output;
mod persist;
mod prepare;
mod reply;
mod request;
mod service;
mod stream;
mod streaming;
mod validate;
mod variants;

pub(crate) use batch_item::BatchVariant;
pub(crate) use checks::FunctionChecks;
pub(crate) use episode::parse_episode_id;
pub(crate) use error::{FailureKind, FunctionError};
pub use model_call::ModelCall;
pub(crate) use output::FunctionOutput;
pub use output::OutputBlock;
pub(crate) use persist::InferencePersistence;
pub(crate) use prepare::DEFAULT_FUNCTION;
pub use reply::InferenceReply;
pub(crate) use request::InferenceRequest;
pub(crate) use service::{FunctionService, InferenceResult};
#[cfg(test)]
pub(crate) use stream::UsageReport;
pub(crate) use stream::{ChunkBody, ContentChunk, InferenceChunk};
#[cfg(test)]
pub(crate) use validate::Includes;
pub(crate) use validate::InferenceCall;

#[cfg(test)]
pub(crate) mod tests;
