//! Dynamic in-context learning (`type = "experimental_dynamic_in_context_learning"` variants).
//!
//! - Examples are built beforehand from the function's stored inferences (`build.rs`, behind
//!   `POST /dicl/build` and `nimbus dicl build`) and kept in the blob store per project, function
//!   and variant with their embeddings (`examples.rs`).
//! - Each instance holds the sets it uses in memory, refreshed when the stored version changes
//!   (`loaded.rs`), and finds the `k` nearest by cosine distance there (`index.rs`).
//! - At inference the request's input, as StoredInput JSON (`stored_input.rs`), is embedded, its
//!   neighbours found, and the prompt written (`prompt.rs`, `retrieve.rs`); the function layer
//!   sends it as the variant's generation call.

mod build;
mod embed;
mod examples;
mod index;
mod loaded;
mod prompt;
mod retrieve;
mod stored_input;

pub use build::{DiclBuildError, DiclBuildReport, DiclBuildRequest, DiclBuilder};
pub use examples::{DiclExample, ExampleSet, ExampleStore, OutputSource};
pub use index::{ExampleIndex, Neighbour};
pub use loaded::{LoadedSets, REFRESH_INTERVAL};
pub(crate) use retrieve::{retrieve, RetrievalTarget, RetrieveError};

use crate::config::DiclConfig;

/// A DICL variant's retrieval settings, compiled (its generation call is the variant's
/// `chat_completion` config).
#[derive(Debug, Clone, PartialEq)]
pub struct DiclSettings {
    pub embedding_model: String,
    pub k: u32,
    pub max_distance: Option<f64>,
    /// The text of `system_instructions`, or the built-in paragraph.
    pub system_instructions: String,
}

impl DiclSettings {
    pub(crate) fn new(config: &DiclConfig, system_instructions: String) -> Self {
        Self {
            embedding_model: config.embedding_model.clone(),
            k: config.k,
            max_distance: config.max_distance,
            system_instructions,
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

#[cfg(test)]
#[path = "service_tests.rs"]
mod service_tests;
