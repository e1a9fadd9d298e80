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

pub use batch_item::BatchVariant;
pub use checks::FunctionChecks;
pub use episode::{parse_episode_id, EpisodeIdError};
pub use error::{FailureKind, FunctionError, VariantFailure};
pub use input::FunctionInput;
pub use model_call::ModelCall;
pub use output::{FunctionOutput, JsonOutput, OutputBlock};
pub use persist::InferencePersistence;
pub use prepare::{DEFAULT_FUNCTION, JSON_TOOL_NAME};
pub use reply::{InferenceReply, RawEntry};
pub use request::{CacheOptions, ChatCompletionParams, InferenceRequest};
pub use service::{FunctionService, InferenceResult, InferenceStream};
pub use stream::{ChunkBody, ContentChunk, InferenceChunk, UsageReport};
pub use validate::{EditScope, Includes, InferenceCall, InferenceTarget, ScopedEdit};

#[cfg(test)]
pub(crate) mod tests;
