//! Why a function inference produced no answer. The TensorZero surface maps each kind to its
//! status in one place (`surface_errors::openai::function_error_status`).

use crate::providers::router::RoutingError;
use crate::user_text::excerpt;

/// One variant's failure, as reported in [`FunctionError::AllVariantsFailed`].
#[derive(Debug, Clone, PartialEq)]
pub struct VariantFailure {
    pub variant: String,
    pub kind: FailureKind,
    pub message: String,
}

/// What kind of failure a variant had: it decides the status when every variant failed alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The request cannot work on this variant (a missing dynamic credential, a bad
    /// `extra_body` edit): the client's to fix.
    Client,
    /// The variant's timeout passed.
    Timeout,
    /// The model's providers failed.
    Provider,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FunctionError {
    /// Bad input: a 400 naming the problem.
    #[error("{0}")]
    InvalidRequest(String),
    #[error("Unknown function: {}", excerpt(.0))]
    UnknownFunction(String),
    #[error("Unknown variant: {} (function {})", excerpt(.variant), excerpt(.function))]
    UnknownVariant { function: String, variant: String },
    /// A `model_name` that is neither a configured model nor a valid shorthand: a 400, as
    /// TensorZero answers (an invalid inference target).
    #[error("Invalid model name: `{}` is not found in the model table", excerpt(.0))]
    UnknownModel(String),
    /// Every variant tried failed.
    #[error("All variants failed with errors: {}", describe(.0))]
    AllVariantsFailed(Vec<VariantFailure>),
    /// The request pinned this variant (`variant_name`) and it failed: its own error is the
    /// answer, with the status TensorZero gives a model error (no fallback, no 502).
    #[error("Variant {} failed: {}", excerpt(&.0.variant), .0.message)]
    PinnedVariantFailed(VariantFailure),
    /// A started stream broke off.
    #[error("{0}")]
    StreamInterrupted(String),
    /// Storage behind the cache or records failed where the answer depends on it.
    #[error("storage failed: {0}")]
    Storage(String),
}

fn describe(failures: &[VariantFailure]) -> String {
    failures
        .iter()
        .map(|f| format!("{}: {}", f.variant, f.message))
        .collect::<Vec<_>>()
        .join("; ")
}

impl FunctionError {
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidRequest(message.into())
    }

    /// Every variant tried failed; with `pinned`, the request named the one variant it may use.
    pub(crate) fn variants_failed(pinned: bool, mut failures: Vec<VariantFailure>) -> Self {
        if pinned && failures.len() == 1 {
            if let Some(failure) = failures.pop() {
                return Self::PinnedVariantFailed(failure);
            }
        }
        Self::AllVariantsFailed(failures)
    }

    /// Every variant failed for the client's reason, or every one timed out (a pinned variant's
    /// failure is its own kind).
    pub(crate) fn uniform_failure(&self) -> Option<FailureKind> {
        let failures = match self {
            Self::AllVariantsFailed(failures) => failures,
            Self::PinnedVariantFailed(failure) => return Some(failure.kind),
            _ => return None,
        };
        let first = failures.first()?.kind;
        failures.iter().all(|f| f.kind == first).then_some(first)
    }
}

impl From<&RoutingError> for FailureKind {
    fn from(error: &RoutingError) -> Self {
        use crate::providers::ProviderError;
        match error {
            RoutingError::AllFailed { failures, .. }
                if !failures.is_empty()
                    && failures.iter().all(|f| {
                        matches!(
                            f.error,
                            ProviderError::MissingCredential(_) | ProviderError::UnsupportedParameter { .. }
                        )
                    }) =>
            {
                Self::Client
            }
            RoutingError::AllFailed { failures, .. }
                if !failures.is_empty()
                    && failures
                        .iter()
                        .all(|f| matches!(f.error, ProviderError::Timeout { .. })) =>
            {
                Self::Timeout
            }
            _ => Self::Provider,
        }
    }
}
