//! A DICL variant's step before its generation call: embed the request's input (StoredInput
//! JSON), find the nearest examples of the variant's set, and write the prompt. The embedding
//! call is recorded as the inference's first model inference and its tokens count in the usage.

use super::embed::embed_texts;
use super::loaded::LoadedSets;
use super::prompt::{with_examples, without_examples, DiclPrompt, MissingOutput};
use super::stored_input::{stored_input_json, StoredInputError};
use super::DiclSettings;
use crate::config::functions::FunctionKind;
use crate::inference::{InferenceError, InferenceService};
use crate::model::{ModelResponse, ModelUsage};
use crate::ports::{ProjectId, StorageError};
use crate::tensorzero::function_calls::input::FunctionInput;
use crate::tensorzero::function_calls::ModelCall;
use serde_json::json;
use std::collections::HashMap;
use std::time::Instant;
use uuid::Uuid;

/// The prompt, and the embedding call that found its examples.
#[derive(Debug, Clone, PartialEq)]
pub struct Retrieved {
    pub prompt: DiclPrompt,
    /// How many examples the prompt holds.
    pub examples: usize,
    /// The embedding call (its tokens as input tokens), stored as a model call.
    pub embedding_call: ModelCall,
}

/// Why the step failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RetrieveError {
    /// The input cannot be shown as StoredInput (a file block): the client's to fix.
    #[error("{0}")]
    Input(#[from] StoredInputError),
    #[error("the embedding model failed: {0}")]
    Embedding(InferenceError),
    #[error("reading the DICL examples failed: {0}")]
    Storage(#[from] StorageError),
    #[error("{0}")]
    MissingOutput(#[from] MissingOutput),
}

/// What the step needs to know about the call.
pub struct RetrievalTarget<'a> {
    pub project: &'a ProjectId,
    pub function_name: &'a str,
    pub variant_name: &'a str,
    pub kind: FunctionKind,
}

/// Run the step for `input`; `call_id` names the embedding's model-inference record.
pub async fn retrieve(
    inference: &InferenceService,
    sets: &LoadedSets,
    settings: &DiclSettings,
    target: RetrievalTarget<'_>,
    input: &FunctionInput,
    credentials: &HashMap<String, String>,
    call_id: Uuid,
) -> Result<Retrieved, RetrieveError> {
    let request_json = stored_input_json(input)?;
    let started = Instant::now();
    let embedded = embed_texts(
        inference,
        &settings.embedding_model,
        vec![request_json.clone()],
        credentials,
    )
    .await
    .map_err(RetrieveError::Embedding)?;
    let latency = started.elapsed();
    let set = sets
        .get(target.project, target.function_name, target.variant_name)
        .await?;
    let query = embedded.vectors.first().map(Vec::as_slice).unwrap_or_default();
    let same_model = set.embedding_model.as_deref() == Some(settings.embedding_model.as_str());
    if !same_model && set.version.is_some() {
        tracing::warn!(
            function = target.function_name,
            variant = target.variant_name,
            "the DICL examples were embedded with another model than the variant's: build them again"
        );
    }
    let k = usize::try_from(settings.k).unwrap_or(usize::MAX);
    let neighbours = if same_model {
        set.index.nearest(query, k, settings.max_distance)
    } else {
        Vec::new()
    };
    if neighbours.len() < k {
        tracing::debug!(found = neighbours.len(), k, "fewer DICL examples than k");
    }
    let prompt = if neighbours.is_empty() {
        without_examples(&settings.system_instructions, input)
    } else {
        with_examples(&settings.system_instructions, target.kind, &neighbours, &request_json)?
    };
    let tokens = embedded.usage.prompt_tokens;
    let response = ModelResponse {
        id: call_id.to_string(),
        choices: Vec::new(),
        usage: ModelUsage::new(tokens, 0),
        system_fingerprint: None,
        raw_response: Some(json!({"usage": embedded.usage, "dimensions": query.len()}).to_string()),
        raw_request: Some(embedded.raw_request),
        provider_name: settings.embedding_model.clone(),
        provider_type: String::new(),
    };
    let embedding_call = ModelCall {
        id: call_id,
        model: settings.embedding_model.clone(),
        provider: settings.embedding_model.clone(),
        response,
        latency,
        ttft: None,
        cached: false,
    };
    Ok(Retrieved {
        prompt,
        examples: neighbours.len(),
        embedding_call,
    })
}
