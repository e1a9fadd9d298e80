//! Running one variant, whatever its type: the single place that dispatches on it. Each type
//! is its own module (dynamic in-context learning's is `dicl.rs`), with one arm in
//! [`FunctionService::run_variant`] and [`FunctionService::stream_variant`].

mod best_of_n;
mod candidates;
mod chain_of_thought;
mod chat_completion;
mod dicl;
mod mixture_of_n;
mod streamed;

use super::error::{FailureKind, FunctionError, VariantFailure};
use super::model_call::ModelCall;
use super::output::{FunctionOutput, OutputBlock};
use super::prepare::{PreparedCall, VariantPlan};
use super::service::{variant_failure, FunctionService};
use super::stream::InferenceChunk;
use super::validate::InferenceCall;
use crate::config::functions::{ChatCompletionConfig, VariantConfig};
use crate::model::{FinishReason, ModelUsage};
use crate::ports::ProjectId;
use crate::providers::router::RoutingError;
use crate::tensorzero::{Function, Variant};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use std::time::Duration;

/// One run of a variant: for whom, with which call, and the suffix a candidate adds to its
/// cache keys (`candidate_{i}`, so repeated candidates are not one cache entry).
#[derive(Clone)]
pub(crate) struct Attempt<'a> {
    pub project: &'a ProjectId,
    pub call: &'a InferenceCall,
    pub cache_suffix: Option<String>,
}

impl<'a> Attempt<'a> {
    pub(crate) fn new(project: &'a ProjectId, call: &'a InferenceCall) -> Self {
        Self {
            project,
            call,
            cache_suffix: None,
        }
    }
}

/// What a variant answered, with every model call it took in the order they are stored.
#[derive(Debug, Clone)]
pub(crate) struct VariantAnswer {
    pub output: FunctionOutput,
    /// Stored with the output, not returned (a chain of thought's reasoning).
    pub auxiliary_content: Vec<OutputBlock>,
    pub finish_reason: Option<FinishReason>,
    pub model_calls: Vec<ModelCall>,
    /// TensorZero's `original_response`: the raw answer of the call that wrote the output.
    pub original_response: Option<String>,
    /// The request that produced the output (the record's tools, output schema, parameters).
    pub prepared: PreparedCall,
}

impl VariantAnswer {
    pub(crate) fn usage(&self) -> ModelUsage {
        total_usage(&self.model_calls)
    }
}

/// Why a variant gave no answer.
#[derive(Debug)]
pub(crate) enum RunError {
    /// The request cannot work on this function (a 400): no other variant is tried.
    Request(FunctionError),
    /// This variant failed; the next may be tried.
    Failed(VariantFailure, Option<RoutingError>),
}

impl From<(VariantFailure, Option<RoutingError>)> for RunError {
    fn from((failure, routing): (VariantFailure, Option<RoutingError>)) -> Self {
        Self::Failed(failure, routing)
    }
}

pub(crate) type RunResult = Result<VariantAnswer, RunError>;

/// Function chunks; an `Err` item ends the stream.
pub(crate) type FunctionChunks = BoxStream<'static, Result<InferenceChunk, FunctionError>>;

/// The usage of every call added up; a cached answer counts zero.
pub(crate) fn total_usage(calls: &[ModelCall]) -> ModelUsage {
    calls
        .iter()
        .filter(|call| !call.cached)
        .fold(ModelUsage::default(), |total, call| {
            ModelUsage::new(
                total.input_tokens + call.response.usage.input_tokens,
                total.output_tokens + call.response.usage.output_tokens,
            )
        })
}

impl<'a> VariantPlan<'a> {
    /// The plan of `variant` of `function` as configured.
    pub(crate) fn for_variant(function: &'a Function, variant: &'a Variant) -> Self {
        Self {
            function_name: &function.name,
            variant_name: &variant.name,
            kind: function.config.kind,
            model: &variant.config.model,
            config: Some(&variant.config),
            function: Some(function),
        }
    }

    /// The variant's configured type; `None` for a `model_name` call.
    fn definition(&self) -> Option<&'a VariantConfig> {
        let function = self.function?;
        function.variant(self.variant_name).ok().map(|v| &v.definition)
    }
}

/// A variant that is not `chat_completion` (what `/batch_inference` refuses).
pub(crate) fn unsupported_for_batch(variant: &Variant) -> Option<FunctionError> {
    match &variant.definition {
        VariantConfig::ChatCompletion(_) => None,
        other => Some(FunctionError::invalid(format!(
            "Variant `{}` is of type `{}`, which does not support batch inference (only `chat_completion` does)",
            crate::user_text::excerpt(&variant.name),
            other.type_name()
        ))),
    }
}

impl FunctionService {
    /// Run the variant `plan` names to a whole answer.
    pub(crate) fn run_variant<'a>(
        &'a self,
        attempt: &'a Attempt<'a>,
        plan: VariantPlan<'a>,
    ) -> BoxFuture<'a, RunResult> {
        Box::pin(async move {
            match plan.definition() {
                None | Some(VariantConfig::ChatCompletion(_)) => chat_completion::run(self, attempt, plan).await,
                Some(VariantConfig::ChainOfThought(_)) => chain_of_thought::run(self, attempt, plan).await,
                Some(VariantConfig::DynamicInContextLearning(_)) => dicl::run(self, attempt, plan).await,
                Some(definition @ VariantConfig::BestOfN(config)) => {
                    within(definition, best_of_n::run(self, attempt, plan, config)).await
                }
                Some(definition @ VariantConfig::MixtureOfN(config)) => {
                    within(definition, mixture_of_n::run(self, attempt, plan, config)).await
                }
            }
        })
    }

    /// Start streaming the variant `plan` names: a model stream for `chat_completion` and a
    /// mixture's fuser, one chunk with the whole answer for best-of-n.
    pub(crate) async fn stream_variant(
        &self,
        attempt: &Attempt<'_>,
        plan: VariantPlan<'_>,
        inference_id: uuid::Uuid,
    ) -> Result<FunctionChunks, RunError> {
        let started = std::time::Instant::now();
        match plan.definition() {
            None | Some(VariantConfig::ChatCompletion(_)) => {
                chat_completion::stream(self, attempt, plan, inference_id).await
            }
            Some(VariantConfig::DynamicInContextLearning(_)) => dicl::stream(self, attempt, plan, inference_id).await,
            Some(VariantConfig::ChainOfThought(_)) => Err(RunError::Failed(
                VariantFailure {
                    variant: plan.variant_name.to_owned(),
                    kind: FailureKind::Provider,
                    message: "experimental_chain_of_thought variants do not support streaming inference".to_owned(),
                },
                None,
            )),
            Some(definition @ VariantConfig::BestOfN(config)) => {
                let answer = within(definition, best_of_n::run(self, attempt, plan, config)).await?;
                self.simulated_stream(attempt, plan, inference_id, answer, started)
            }
            Some(VariantConfig::MixtureOfN(config)) => {
                match mixture_of_n::stream(self, attempt, plan, config, inference_id).await? {
                    mixture_of_n::Fused::Streaming(chunks) => Ok(chunks),
                    mixture_of_n::Fused::Whole(answer) => {
                        self.simulated_stream(attempt, plan, inference_id, *answer, started)
                    }
                }
            }
        }
    }
}

/// An ensemble's own `timeouts.non_streaming.total_ms` around its whole run.
async fn within<T>(
    definition: &VariantConfig,
    run: impl std::future::Future<Output = Result<T, RunError>>,
) -> Result<T, RunError> {
    let limit = definition
        .timeouts()
        .and_then(|t| t.non_streaming.as_ref())
        .and_then(|t| t.total_ms)
        .map(Duration::from_millis);
    match limit {
        Some(limit) => match tokio::time::timeout(limit, run).await {
            Ok(outcome) => outcome,
            Err(_) => Err(variant_failure(None, Some(limit)).into()),
        },
        None => run.await,
    }
}

/// The judge's or fuser's call, as a plan: its model and keys, the ensemble's templates.
fn prompt_plan<'a>(plan: VariantPlan<'a>, config: &'a ChatCompletionConfig) -> VariantPlan<'a> {
    VariantPlan {
        model: &config.model,
        config: Some(config),
        ..plan
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
