//! The function layer's business logic: pick a variant (deterministic per episode, pinned, or
//! the next after a failure), run it (`variants` dispatches on its type), and record the
//! answer; calls a model with the variant's retries and timeouts. Mints the inference id.

use super::checks::{FunctionChecks, Resolved};
use super::error::{FailureKind, FunctionError, VariantFailure};
use super::model_call::ModelCall;
use super::output::FunctionOutput;
use super::persist::{Finished, InferencePersistence};
use super::prepare::{PreparedCall, VariantPlan};
use super::streaming::StartedModelStream;
use super::validate::InferenceCall;
use super::variants::{Attempt, FunctionChunks, RunError, VariantAnswer};
use crate::backoff::{Backoff, Jitter};
use crate::config::functions::{ChatCompletionConfig, FunctionKind};
use crate::inference::{InferenceError, InferenceService};
use crate::model::{FinishReason, ModelUsage};
use crate::ports::{CacheKey, IdSource, ProjectId};
use crate::providers::router::RoutingError;
use crate::providers::ProviderError;
use crate::tensorzero::dicl::LoadedSets;
use crate::tensorzero::FunctionSet;
use futures::StreamExt;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// First wait between attempts of one variant; doubled per retry up to `max_delay_s`.
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(100);

/// A finished (non-streamed) function inference.
#[derive(Debug, Clone, PartialEq)]
pub struct InferenceResult {
    pub inference_id: Uuid,
    pub episode_id: Uuid,
    pub function_name: String,
    pub variant_name: String,
    pub kind: FunctionKind,
    pub output: FunctionOutput,
    /// Summed over every model call; a cached answer counts zero.
    pub usage: ModelUsage,
    pub finish_reason: Option<FinishReason>,
    /// Every model call the answer took, in the order they are stored.
    pub model_calls: Vec<ModelCall>,
    /// TensorZero's `original_response`: the raw answer of the call that wrote the output.
    pub original_response: Option<String>,
    pub processing_time: Duration,
}

/// A streamed function inference that has started.
pub(crate) struct InferenceStream {
    pub function_name: String,
    #[cfg(test)]
    pub inference_id: Uuid,
    pub variant_name: String,
    /// Function chunks; an `Err` item ends the stream.
    pub chunks: FunctionChunks,
}

pub struct FunctionService {
    /// The configured functions, the clock and the ids (every id a call mints).
    checks: FunctionChecks,
    inference: Arc<InferenceService>,
    persistence: InferencePersistence,
    /// DICL variants' examples, as this instance holds them.
    dicl_sets: Arc<LoadedSets>,
}

impl FunctionService {
    pub fn new(
        functions: Arc<FunctionSet>,
        inference: Arc<InferenceService>,
        persistence: InferencePersistence,
        ids: Arc<dyn IdSource>,
        dicl_sets: Arc<LoadedSets>,
    ) -> Self {
        let checks = FunctionChecks::new(functions, Arc::clone(&persistence.clock), ids);
        Self {
            checks,
            inference,
            persistence,
            dicl_sets,
        }
    }

    /// Bind episodes of adaptive experiments through `experiments`.
    pub fn with_experiments(mut self, experiments: Arc<crate::tensorzero::experiments::Experiments>) -> Self {
        self.checks = self.checks.with_experiments(experiments);
        self
    }

    /// DICL variants' examples as this instance holds them (a build drops what it replaced).
    pub fn dicl_sets(&self) -> Arc<LoadedSets> {
        Arc::clone(&self.dicl_sets)
    }

    /// The inference layer (a DICL variant embeds through it).
    pub(super) fn inference(&self) -> &InferenceService {
        &self.inference
    }

    /// What calls are checked with before a model is called.
    pub fn checks(&self) -> &FunctionChecks {
        &self.checks
    }

    pub fn functions(&self) -> &FunctionSet {
        self.checks.functions()
    }

    pub fn now_ms(&self) -> i64 {
        self.checks.now_ms()
    }

    pub(crate) fn new_id(&self) -> Uuid {
        self.checks.new_id()
    }

    pub(super) fn persistence(&self) -> &InferencePersistence {
        &self.persistence
    }

    /// A complete answer; its record (and cache entry) are written after the response.
    pub(crate) async fn infer(
        &self,
        project: &ProjectId,
        call: &InferenceCall,
    ) -> Result<InferenceResult, FunctionError> {
        let started = Instant::now();
        let target = self.checks.resolve_bound(project, call).await?;
        let inference_id = self.checks.new_id();
        let attempt = Attempt::new(project, call);
        let mut failed = BTreeSet::new();
        let mut failures = Vec::new();
        while let Some(plan) = self.checks.next_plan(target, call, &failed) {
            match self.run_variant(&attempt, plan).await {
                Ok(answer) => return Ok(self.finish(&attempt, plan, inference_id, answer, started)),
                Err(error) => failures.push(self.variant_failed(target, plan, error)?),
            }
            failed.insert(plan.variant_name.to_owned());
        }
        Err(FunctionError::variants_failed(call.variant_name.is_some(), failures))
    }

    /// A streamed answer: variants fall back until one starts streaming (its first chunk within
    /// the variant's `ttft_ms`); after that, errors end the stream. The record (and cache entry)
    /// are written once the stream has ended.
    pub(crate) async fn infer_stream(
        &self,
        project: &ProjectId,
        call: &InferenceCall,
    ) -> Result<InferenceStream, FunctionError> {
        let target = self.checks.resolve_bound(project, call).await?;
        let inference_id = self.checks.new_id();
        let attempt = Attempt::new(project, call);
        let mut failed = BTreeSet::new();
        let mut failures = Vec::new();
        while let Some(plan) = self.checks.next_plan(target, call, &failed) {
            match self.stream_variant(&attempt, plan, inference_id).await {
                Ok(chunks) => {
                    return Ok(InferenceStream {
                        function_name: target.name().to_owned(),
                        #[cfg(test)]
                        inference_id,
                        variant_name: plan.variant_name.to_owned(),
                        chunks,
                    })
                }
                Err(error) => failures.push(self.variant_failed(target, plan, error)?),
            }
            failed.insert(plan.variant_name.to_owned());
        }
        Err(FunctionError::variants_failed(call.variant_name.is_some(), failures))
    }

    /// A variant's failure as reported, or the error that ends the inference at once (a bad
    /// request, an unknown `model_name`).
    fn variant_failed(
        &self,
        target: Resolved<'_>,
        plan: VariantPlan<'_>,
        error: RunError,
    ) -> Result<VariantFailure, FunctionError> {
        match error {
            RunError::Request(error) => Err(error),
            RunError::Failed(failure, routing) => {
                if let (Resolved::Model(model), Some(RoutingError::ModelNotFound(_))) = (target, &routing) {
                    return Err(FunctionError::UnknownModel(model.to_owned()));
                }
                Ok(VariantFailure {
                    variant: plan.variant_name.to_owned(),
                    ..failure
                })
            }
        }
    }

    /// The result of a variant's answer, its record written after the response.
    pub(super) fn finish(
        &self,
        attempt: &Attempt<'_>,
        plan: VariantPlan<'_>,
        inference_id: Uuid,
        answer: VariantAnswer,
        started: Instant,
    ) -> InferenceResult {
        let result = InferenceResult {
            inference_id,
            episode_id: attempt.call.episode_id,
            function_name: plan.function_name.to_owned(),
            variant_name: plan.variant_name.to_owned(),
            kind: plan.kind,
            usage: answer.usage(),
            output: answer.output,
            finish_reason: answer.finish_reason,
            model_calls: answer.model_calls,
            original_response: answer.original_response,
            processing_time: started.elapsed(),
        };
        self.persistence.record(Finished {
            project: attempt.project,
            call: attempt.call,
            prepared: &answer.prepared,
            inference_id,
            function_name: &result.function_name,
            variant_name: &result.variant_name,
            kind: result.kind,
            output: &result.output,
            usage: &result.usage,
            finish_reason: result.finish_reason,
            model_calls: &result.model_calls,
            auxiliary_content: &answer.auxiliary_content,
            processing_time: result.processing_time,
        });
        result
    }

    /// The cache key of a prepared request (a candidate's carries its suffix).
    pub(super) fn cache_key(&self, attempt: &Attempt<'_>, prepared: &PreparedCall, streamed: bool) -> CacheKey {
        let key = CacheKey::new(attempt.project, &prepared.request.model, &prepared.request, streamed);
        match &attempt.cache_suffix {
            Some(suffix) => key.salted(suffix),
            None => key,
        }
    }

    /// Call one variant's model, retrying as the variant says, within its timeout.
    pub(super) async fn call_with_retries(
        &self,
        attempt: &Attempt<'_>,
        config: Option<&ChatCompletionConfig>,
        prepared: &PreparedCall,
    ) -> Result<ModelCall, (VariantFailure, Option<RoutingError>)> {
        let call = attempt.call;
        let mode = self.persistence.mode(call);
        let key = self.cache_key(attempt, prepared, false);
        let looked_up = Instant::now();
        if let Some(response) = self.persistence.cached(&key, mode, call.cache_max_age_s).await {
            return Ok(ModelCall {
                id: self.checks.new_id(),
                model: prepared.request.model.clone(),
                provider: response.provider_name.clone(),
                response,
                latency: looked_up.elapsed(),
                ttft: None,
                cached: true,
            });
        }
        let retries = config.map(|c| c.retries.clone()).unwrap_or_default();
        let timeout = config
            .and_then(|c| c.timeouts.as_ref())
            .and_then(|t| t.non_streaming.as_ref())
            .and_then(|t| t.total_ms)
            .map(Duration::from_millis);
        let mut attempt = 0;
        loop {
            let started = Instant::now();
            let answer = self.inference.model_chat(&prepared.request, &call.credentials);
            let outcome = match timeout {
                Some(limit) => match tokio::time::timeout(limit, answer).await {
                    Ok(outcome) => outcome.map_err(Some),
                    Err(_) => Err(None),
                },
                None => answer.await.map_err(Some),
            };
            let error = match outcome {
                Ok(response) => {
                    self.persistence.remember(key, mode, &response);
                    return Ok(ModelCall {
                        id: self.checks.new_id(),
                        model: prepared.request.model.clone(),
                        provider: response.provider_name.clone(),
                        response,
                        latency: started.elapsed(),
                        ttft: None,
                        cached: false,
                    });
                }
                Err(error) => error,
            };
            let failure = variant_failure(error.as_ref(), timeout);
            let retry = attempt < retries.num_retries && failure.0.kind == FailureKind::Provider;
            if !retry {
                return Err(failure);
            }
            tokio::time::sleep(retry_delay(attempt, retries.max_delay_s)).await;
            attempt += 1;
        }
    }

    /// The stream and its first chunk, or why it did not start.
    pub(super) async fn start_stream(
        &self,
        prepared: &PreparedCall,
        call: &InferenceCall,
        ttft: Option<Duration>,
    ) -> Result<StartedModelStream, (VariantFailure, Option<RoutingError>)> {
        let start = async {
            let mut stream = self
                .inference
                .model_chat_stream(&prepared.request, &call.credentials)
                .await
                .map_err(Some)?;
            let failed = |error| {
                Some(InferenceError::Routing(RoutingError::AllFailed {
                    model: prepared.request.model.clone(),
                    failures: vec![crate::providers::router::ProviderFailure {
                        provider: String::new(),
                        attempts: 1,
                        error,
                    }],
                }))
            };
            match stream.chunks.next().await {
                Some(Ok(first)) => Ok(StartedModelStream {
                    first: Some(first),
                    rest: stream.chunks,
                    provider_name: stream.provider_name,
                    raw_request: stream.raw_request,
                }),
                Some(Err(error)) => Err(failed(error)),
                None => Err(failed(ProviderError::InvalidResponse(
                    "the stream ended before any chunk".to_owned(),
                ))),
            }
        };
        match ttft {
            Some(limit) => match tokio::time::timeout(limit, start).await {
                Ok(outcome) => outcome.map_err(|e| variant_failure(e.as_ref(), Some(limit))),
                Err(_) => Err(variant_failure(None, Some(limit))),
            },
            None => start.await.map_err(|e| variant_failure(e.as_ref(), None)),
        }
    }
}

/// A variant failure from a model error (`None`: the variant's timeout passed).
pub(super) fn variant_failure(
    error: Option<&InferenceError>,
    timeout: Option<Duration>,
) -> (VariantFailure, Option<RoutingError>) {
    let (kind, message, routing) = match error {
        None => (
            FailureKind::Timeout,
            format!(
                "timed out after {} ms",
                timeout.map(|t| t.as_millis()).unwrap_or_default()
            ),
            None,
        ),
        Some(InferenceError::Routing(routing)) => {
            (FailureKind::from(routing), describe(routing), Some(routing.clone()))
        }
        Some(other) => (FailureKind::Client, other.to_string(), None),
    };
    (
        VariantFailure {
            variant: String::new(),
            kind,
            message,
        },
        routing,
    )
}

fn describe(error: &RoutingError) -> String {
    match error {
        RoutingError::ModelNotFound(model) => format!("model `{}` not found", crate::user_text::excerpt(model)),
        RoutingError::Unsupported { model, capability } => format!("model `{model}` does not support {capability}"),
        RoutingError::AllFailed { model, failures } => {
            let each: Vec<String> = failures
                .iter()
                .map(|f| format!("{} ({} attempts): {}", f.provider, f.attempts, f.error))
                .collect();
            format!("model `{model}`: {}", each.join("; "))
        }
    }
}

/// Truncated exponential backoff with full jitter.
fn retry_delay(attempt: u32, max_delay_s: f64) -> Duration {
    let backoff = Backoff {
        first: FIRST_RETRY_DELAY,
        cap: Duration::try_from_secs_f64(max_delay_s.max(0.0)).unwrap_or(Duration::MAX),
    };
    Jitter::Full.apply(backoff.delay(attempt), rand::random::<f64>())
}
