//! Why managing webhook secrets or endpoints failed (mapped to the OpenAI envelope in
//! `openai::error`).

use crate::ports::StorageError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WebhooksError {
    /// No such object in the caller's project (another project's id is not found either).
    #[error("No such {what} object: {}", crate::user_text::excerpt(.id))]
    NotFound { what: &'static str, id: String },
    /// Bad input, naming the parameter.
    #[error("{message}")]
    Invalid { message: String, param: &'static str },
    /// A per-project limit is reached.
    #[error("{message}")]
    LimitReached { message: String },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl WebhooksError {
    pub(crate) fn invalid(message: impl Into<String>, param: &'static str) -> Self {
        Self::Invalid {
            message: message.into(),
            param,
        }
    }
}
