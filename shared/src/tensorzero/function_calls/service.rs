//! The function layer's business logic: pick a variant (deterministic per episode, pinned, or
//! the next after a failure), prepare its model request, call it with the variant's retries and
//! timeouts, and turn the answer into the function's output. Mints the inference id.

use super::checks::{FunctionChecks, Resolved};
use super::error::{FailureKind, FunctionError, VariantFailure};
use super::model_call::ModelCall;
use super::output::{function_output, FunctionOutput};
use super::persist::{Finished, InferencePersistence};
use super::prepare::{prepare, prepare_written, PreparedCall, VariantPlan};
use super::stream::{ChunkTranslator, InferenceChunk};
use super::streaming::{function_chunks, StartedModelStream, StreamFinish};
use super::validate::InferenceCall;
use crate::backoff::{Backoff, Jitter};
use crate::config::functions::{ChatCompletionConfig, FunctionKind};
use crate::inference::{InferenceError, InferenceService};
use crate::model::{FinishReason, ModelUsage};
use crate::ports::inference_records::ModelCallRecord;
use crate::ports::{CacheKey, IdSource, ProjectId};
use crate::providers::router::RoutingError;
use crate::providers::ProviderError;
use crate::tensorzero::dicl::{self, LoadedSets, RetrievalTarget, RetrieveError};
use crate::tensorzero::FunctionSet;
use crate::user_text::excerpt;
use futures::stream::BoxStream;
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
    /// Zero for a cached answer.
    pub usage: ModelUsage,
    pub finish_reason: Option<FinishReason>,
    pub model_call: ModelCall,
    pub processing_time: Duration,
}

/// A streamed function inference that has started.
pub(crate) struct InferenceStream {
    pub function_name: String,
    #[cfg(test)]
    pub inference_id: Uuid,
    pub variant_name: String,
    /// Function chunks; an `Err` item ends the stream.
    pub chunks: BoxStream<'static, Result<InferenceChunk, FunctionError>>,
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

    /// DICL variants' examples as this instance holds them (a build drops what it replaced).
    pub fn dicl_sets(&self) -> Arc<LoadedSets> {
        Arc::clone(&self.dicl_sets)
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
        let target = self.checks.resolve(call)?;
        let inference_id = self.checks.new_id();
        let mut failed = BTreeSet::new();
        let mut failures = Vec::new();
        while let Some(plan) = self.checks.next_plan(target, call, &failed) {
            let Some((prepared, before)) = self
                .prepare_plan(project, plan, call, &mut failures, &mut failed)
                .await?
            else {
                continue;
            };
            match self.call_with_retries(project, plan.config, &prepared, call).await {
                Ok(model_call) => {
                    let choice = model_call.response.choices.first();
                    let output = function_output(plan.kind, choice, &prepared.rules);
                    let mut usage = if model_call.cached {
                        ModelUsage::default()
                    } else {
                        model_call.response.usage.clone()
                    };
                    usage.input_tokens += before.usage.input_tokens;
                    let result = InferenceResult {
                        inference_id,
                        episode_id: call.episode_id,
                        function_name: target.name().to_owned(),
                        variant_name: plan.variant_name.to_owned(),
                        kind: plan.kind,
                        output,
                        usage,
                        finish_reason: choice.and_then(|c| c.finish_reason),
                        model_call,
                        processing_time: started.elapsed(),
                    };
                    self.persistence.record(Finished {
                        project,
                        call,
                        prepared: &prepared,
                        inference_id,
                        function_name: &result.function_name,
                        variant_name: &result.variant_name,
                        kind: result.kind,
                        output: &result.output,
                        usage: &result.usage,
                        finish_reason: result.finish_reason,
                        model_call: &result.model_call,
                        before: &before.calls,
                        processing_time: result.processing_time,
                    });
                    return Ok(result);
                }
                Err(failure) => {
                    if let (Resolved::Model(model), Some(error)) = (target, &failure.1) {
                        if matches!(error, RoutingError::ModelNotFound(_)) {
                            return Err(FunctionError::UnknownModel(model.to_owned()));
                        }
                    }
                    failures.push(VariantFailure {
                        variant: plan.variant_name.to_owned(),
                        kind: failure.0.kind,
                        message: failure.0.message,
                    });
                    failed.insert(plan.variant_name.to_owned());
                }
            }
        }
        Err(FunctionError::AllVariantsFailed(failures))
    }

    /// Call one variant's model, retrying as the variant says, within its timeout.
    pub(super) async fn call_with_retries(
        &self,
        project: &ProjectId,
        config: Option<&ChatCompletionConfig>,
        prepared: &PreparedCall,
        call: &InferenceCall,
    ) -> Result<ModelCall, (VariantFailure, Option<RoutingError>)> {
        let mode = self.persistence.mode(call);
        let key = CacheKey::new(project, &prepared.request.model, &prepared.request, false);
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

    /// A streamed answer: variants fall back until one starts streaming (its first chunk within
    /// the variant's `ttft_ms`); after that, errors end the stream. The record (and cache entry)
    /// are written once the stream has ended.
    pub(crate) async fn infer_stream(
        &self,
        project: &ProjectId,
        call: &InferenceCall,
    ) -> Result<InferenceStream, FunctionError> {
        let target = self.checks.resolve(call)?;
        let inference_id = self.checks.new_id();
        let mode = self.persistence.mode(call);
        let mut failed = BTreeSet::new();
        let mut failures = Vec::new();
        while let Some(plan) = self.checks.next_plan(target, call, &failed) {
            let Some((prepared, before)) = self
                .prepare_plan(project, plan, call, &mut failures, &mut failed)
                .await?
            else {
                continue;
            };
            let timeouts = plan
                .config
                .and_then(|c| c.timeouts.as_ref())
                .and_then(|t| t.streaming.clone())
                .unwrap_or_default();
            let started = Instant::now();
            let key = CacheKey::new(project, &prepared.request.model, &prepared.request, true);
            let cached = self.persistence.cached(&key, mode, call.cache_max_age_s).await;
            let outcome = match &cached {
                Some(response) => Ok(StartedModelStream::from_cache(response)),
                None => {
                    self.start_stream(&prepared, call, timeouts.ttft_ms.map(Duration::from_millis))
                        .await
                }
            };
            match outcome {
                Ok(started_stream) => {
                    let translator = ChunkTranslator::new(
                        inference_id,
                        call.episode_id,
                        plan.variant_name.to_owned(),
                        plan.kind,
                        &prepared.rules,
                        cached.is_some(),
                    )
                    .with_added_usage(&before.usage);
                    let deadline = timeouts
                        .total_ms
                        .map(|ms| tokio::time::Instant::from_std(started) + Duration::from_millis(ms));
                    let finish = StreamFinish {
                        persistence: self.persistence.clone(),
                        project: project.clone(),
                        call: call.clone(),
                        prepared,
                        inference_id,
                        model_call_id: self.checks.new_id(),
                        function_name: target.name().to_owned(),
                        variant_name: plan.variant_name.to_owned(),
                        kind: plan.kind,
                        key,
                        mode,
                        cached: cached.is_some(),
                        started,
                        ttft: started.elapsed(),
                        provider_name: started_stream.provider_name,
                        raw_request: started_stream.raw_request,
                        before,
                    };
                    return Ok(InferenceStream {
                        function_name: target.name().to_owned(),
                        #[cfg(test)]
                        inference_id,
                        variant_name: plan.variant_name.to_owned(),
                        chunks: function_chunks(
                            started_stream.first,
                            started_stream.rest,
                            translator,
                            deadline,
                            finish,
                        ),
                    });
                }
                Err((failure, routing)) => {
                    if let (Resolved::Model(model), Some(RoutingError::ModelNotFound(_))) = (target, &routing) {
                        return Err(FunctionError::UnknownModel(model.to_owned()));
                    }
                    failures.push(VariantFailure {
                        variant: plan.variant_name.to_owned(),
                        ..failure
                    });
                    failed.insert(plan.variant_name.to_owned());
                }
            }
        }
        Err(FunctionError::AllVariantsFailed(failures))
    }

    /// A variant's prepared call, and what ran before it (a DICL variant's embedding step). A
    /// request error ends the inference; a variant failure is added to `failures` and `failed`
    /// (`None`: try the next variant).
    async fn prepare_plan(
        &self,
        project: &ProjectId,
        plan: VariantPlan<'_>,
        call: &InferenceCall,
        failures: &mut Vec<VariantFailure>,
        failed: &mut BTreeSet<String>,
    ) -> Result<Option<(PreparedCall, BeforeCall)>, FunctionError> {
        match self.plan_step(project, plan, call).await? {
            Ok(planned) => Ok(Some(planned)),
            Err(failure) => {
                failures.push(failure);
                failed.insert(plan.variant_name.to_owned());
                Ok(None)
            }
        }
    }

    async fn plan_step(
        &self,
        project: &ProjectId,
        plan: VariantPlan<'_>,
        call: &InferenceCall,
    ) -> Result<Result<(PreparedCall, BeforeCall), VariantFailure>, FunctionError> {
        let settings = plan
            .function
            .and_then(|f| f.variant(plan.variant_name).ok())
            .and_then(|v| v.dicl.as_ref());
        let Some(settings) = settings else {
            return Ok(Ok((prepare(self.functions(), plan, call)?, BeforeCall::default())));
        };
        if !call.extra_body.is_empty() {
            return Err(FunctionError::invalid(format!(
                "`extra_body` cannot be given at inference time for variant `{}`: it is of type `experimental_dynamic_in_context_learning`",
                excerpt(plan.variant_name)
            )));
        }
        let target = RetrievalTarget {
            project,
            function_name: plan.function_name,
            variant_name: plan.variant_name,
            kind: plan.kind,
        };
        let call_id = self.checks.new_id();
        let step = dicl::retrieve(
            &self.inference,
            &self.dicl_sets,
            settings,
            target,
            &call.input,
            &call.credentials,
            call_id,
        );
        // The variant's timeout (total, or time to first token when streamed) bounds this step too.
        let timeouts = plan.config.and_then(|c| c.timeouts.as_ref());
        let limit = match call.stream {
            true => timeouts.and_then(|t| t.streaming.as_ref()).and_then(|t| t.ttft_ms),
            false => timeouts.and_then(|t| t.non_streaming.as_ref()).and_then(|t| t.total_ms),
        }
        .map(Duration::from_millis);
        let outcome = match limit {
            Some(limit) => match tokio::time::timeout(limit, step).await {
                Ok(outcome) => outcome,
                Err(_) => {
                    let (failure, _) = variant_failure(None, Some(limit));
                    return Ok(Err(VariantFailure {
                        variant: plan.variant_name.to_owned(),
                        ..failure
                    }));
                }
            },
            None => step.await,
        };
        match outcome {
            Ok(retrieved) => {
                let prompt = &retrieved.prompt;
                let prepared = prepare_written(self.functions(), plan, call, prompt.system.clone(), &prompt.messages)?;
                let before = BeforeCall {
                    calls: vec![retrieved.embedding_call],
                    usage: retrieved.usage,
                };
                Ok(Ok((prepared, before)))
            }
            Err(RetrieveError::Input(error)) => Err(FunctionError::invalid(error.to_string())),
            Err(error) => {
                let kind = match &error {
                    RetrieveError::Embedding(InferenceError::Routing(routing)) => FailureKind::from(routing),
                    RetrieveError::Embedding(_) => FailureKind::Client,
                    _ => FailureKind::Provider,
                };
                Ok(Err(VariantFailure {
                    variant: plan.variant_name.to_owned(),
                    kind,
                    message: error.to_string(),
                }))
            }
        }
    }

    /// The stream and its first chunk, or why it did not start.
    async fn start_stream(
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

/// Model calls a variant made before its generation call (a DICL variant's embedding), recorded
/// first among the inference's model inferences, and their tokens.
#[derive(Debug, Clone, Default)]
pub(super) struct BeforeCall {
    pub calls: Vec<ModelCallRecord>,
    pub usage: ModelUsage,
}

/// A variant failure from a model error (`None`: the variant's timeout passed).
fn variant_failure(
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
