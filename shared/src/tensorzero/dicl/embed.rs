//! Texts embedded with a DICL variant's `embedding_model` (a `[models.M]` name or a
//! `provider::model` shorthand), through the inference layer like `/openai/v1/embeddings`.

use crate::inference::{InferenceError, InferenceService};
use crate::openai::embeddings::{EmbeddingInput, EmbeddingRequest, EmbeddingUsage, EmbeddingVector};
use std::collections::HashMap;

/// The vectors of some texts, in their order, and what the call cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedded {
    pub vectors: Vec<Vec<f32>>,
    pub usage: EmbeddingUsage,
    /// The request as sent to the inference layer (JSON), for the model-inference record.
    pub raw_request: String,
}

/// Embed `texts` with `model` in one call.
pub async fn embed_texts(
    inference: &InferenceService,
    model: &str,
    texts: Vec<String>,
    credentials: &HashMap<String, String>,
) -> Result<Embedded, InferenceError> {
    let count = texts.len();
    let request = EmbeddingRequest {
        model: model.to_owned(),
        input: EmbeddingInput::Texts(texts),
        encoding_format: None,
        dimensions: None,
        user: None,
    };
    let raw_request = serde_json::to_string(&request).unwrap_or_default();
    let response = inference.embed(&request, credentials).await?;
    let mut vectors = vec![Vec::new(); count];
    for data in response.data {
        if let (Some(slot), EmbeddingVector::Float(vector)) = (vectors.get_mut(data.index), data.embedding) {
            *slot = vector;
        }
    }
    if vectors.iter().any(Vec::is_empty) {
        return Err(InferenceError::Routing(
            crate::providers::router::RoutingError::AllFailed {
                model: model.to_owned(),
                failures: vec![crate::providers::router::ProviderFailure {
                    provider: String::new(),
                    attempts: 1,
                    error: crate::providers::ProviderError::InvalidResponse(format!(
                        "the embedding model answered fewer than the {count} vectors asked for"
                    )),
                }],
            },
        ));
    }
    Ok(Embedded {
        vectors,
        usage: response.usage,
        raw_request,
    })
}
