//! What the async API refuses, and why.

use crate::ports::StorageError;
use crate::user_text::excerpt;

#[derive(Debug, thiserror::Error)]
pub enum AsyncError {
    /// Bad input: a 400 naming the field.
    #[error("{message}")]
    InvalidInput { field: String, message: String },
    /// The model (or function) to run does not exist: a 400 naming the field.
    #[error("Model `{}` does not exist.", excerpt(.model))]
    UnknownModel { field: String, model: String },
    /// No such request in the caller's project.
    #[error("No async request with id `{}`.", excerpt(.0))]
    NotFound(String),
    /// Storage or the queue failed: nothing was accepted.
    #[error("storage failed: {0}")]
    Storage(#[from] StorageError),
}

impl AsyncError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidInput {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The field a 400 names, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::InvalidInput { field, .. } | Self::UnknownModel { field, .. } => Some(field),
            _ => None,
        }
    }
}
