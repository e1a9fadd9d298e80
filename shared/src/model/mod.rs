//! The provider-neutral model request and response. Every entry point (the OpenAI routes, batch
//! lines, later `/inference` and async requests) translates its wire request into a
//! [`ModelRequest`]; every provider translates out of it into its own wire format, and back into a
//! [`ModelResponse`] or [`ModelChunk`]s. No provider sees another API's wire types.

mod content;
mod extra;
mod request;
mod response;

pub use content::{ContentBlock, FileData, Message, Role};
pub use extra::{apply_extra_body, ExtraBodyEntry, ExtraBodyError, ExtraEdit, ExtraHeaderEntry};
pub use request::{
    ModelRequest, OpenAiPassThrough, OutputMode, SamplingParams, StreamOptions, ToolChoice, ToolDefinition,
};
pub use response::{ChunkBlock, ChunkChoice, FinishReason, ModelChoice, ModelChunk, ModelResponse, ModelUsage};
