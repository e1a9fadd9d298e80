//! `experimental_dynamic_in_context_learning`: the DICL step (`crate::tensorzero::dicl`:
//! embed the request's input, find the nearest examples, write the prompt), then one generation
//! call like `chat_completion`'s, whole or streamed for real. The embedding call is the answer's
//! first model call (streamed: stored with the others after the generation) and counts in the
//! usage. The variant's timeout (total, or time to first token when streamed) bounds the step
//! too; an inference-level `extra_body` is refused, as TensorZero refuses it.

use super::super::error::{FailureKind, FunctionError, VariantFailure};
use super::super::model_call::ModelCall;
use super::super::prepare::{prepare_written, PreparedCall, VariantPlan};
use super::super::service::{variant_failure, FunctionService};
use super::chat_completion::answer_of;
use super::{Attempt, FunctionChunks, RunError, RunResult};
use crate::inference::InferenceError;
use crate::tensorzero::dicl::{self, DiclSettings, RetrievalTarget, RetrieveError};
use crate::user_text::excerpt;
use std::time::Duration;

pub(super) async fn run(service: &FunctionService, attempt: &Attempt<'_>, plan: VariantPlan<'_>) -> RunResult {
    let (prepared, embedding) = prepare_dicl(service, attempt, plan).await?;
    let call = service.call_with_retries(attempt, plan.config, &prepared).await?;
    let mut answer = answer_of(plan.kind, prepared, call);
    answer.model_calls.insert(0, embedding);
    Ok(answer)
}

pub(super) async fn stream(
    service: &FunctionService,
    attempt: &Attempt<'_>,
    plan: VariantPlan<'_>,
    inference_id: uuid::Uuid,
) -> Result<FunctionChunks, RunError> {
    let (prepared, embedding) = prepare_dicl(service, attempt, plan).await?;
    service
        .stream_prepared(attempt, plan, prepared, inference_id, vec![embedding])
        .await
}

fn settings<'a>(plan: &VariantPlan<'a>) -> Result<&'a DiclSettings, RunError> {
    plan.function
        .and_then(|f| f.variant(plan.variant_name).ok())
        .and_then(|v| v.dicl.as_deref())
        .ok_or_else(|| {
            RunError::Request(FunctionError::invalid(format!(
                "variant `{}` has no DICL settings",
                excerpt(plan.variant_name)
            )))
        })
}

/// The generation request with the nearest examples, and the embedding call that found them.
async fn prepare_dicl(
    service: &FunctionService,
    attempt: &Attempt<'_>,
    plan: VariantPlan<'_>,
) -> Result<(PreparedCall, ModelCall), RunError> {
    let call = attempt.call;
    let settings = settings(&plan)?;
    if !call.extra_body.is_empty() {
        return Err(RunError::Request(FunctionError::invalid(format!(
            "`extra_body` cannot be given at inference time for variant `{}`: it is of type `experimental_dynamic_in_context_learning`",
            excerpt(plan.variant_name)
        ))));
    }
    let target = RetrievalTarget {
        project: attempt.project,
        function_name: plan.function_name,
        variant_name: plan.variant_name,
        kind: plan.kind,
    };
    let sets = service.dicl_sets();
    let step = dicl::retrieve(
        service.inference(),
        &sets,
        settings,
        target,
        &call.input,
        &call.credentials,
        service.new_id(),
    );
    let timeouts = plan.config.and_then(|c| c.timeouts.as_ref());
    let limit = match call.stream {
        true => timeouts.and_then(|t| t.streaming.as_ref()).and_then(|t| t.ttft_ms),
        false => timeouts.and_then(|t| t.non_streaming.as_ref()).and_then(|t| t.total_ms),
    }
    .map(Duration::from_millis);
    let outcome = match limit {
        Some(limit) => match tokio::time::timeout(limit, step).await {
            Ok(outcome) => outcome,
            Err(_) => return Err(variant_failure(None, Some(limit)).into()),
        },
        None => step.await,
    };
    let retrieved = match outcome {
        Ok(retrieved) => retrieved,
        Err(RetrieveError::Input(error)) => return Err(RunError::Request(FunctionError::invalid(error.to_string()))),
        Err(error) => {
            let kind = match &error {
                RetrieveError::Embedding(InferenceError::Routing(routing)) => FailureKind::from(routing),
                RetrieveError::Embedding(_) => FailureKind::Client,
                _ => FailureKind::Provider,
            };
            let failure = VariantFailure {
                variant: plan.variant_name.to_owned(),
                kind,
                message: error.to_string(),
            };
            return Err(RunError::Failed(failure, None));
        }
    };
    let prompt = &retrieved.prompt;
    let prepared = prepare_written(service.functions(), plan, call, prompt.system.clone(), &prompt.messages)
        .map_err(RunError::Request)?;
    Ok((prepared, retrieved.embedding_call))
}
