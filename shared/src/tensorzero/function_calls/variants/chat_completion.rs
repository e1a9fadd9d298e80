//! `chat_completion`: one model call with the variant's templates and parameters.

use super::super::model_call::ModelCall;
use super::super::output::function_output;
use super::super::prepare::{prepare, PreparedCall, VariantPlan};
use super::super::service::FunctionService;
use super::{Attempt, FunctionChunks, RunError, RunResult, VariantAnswer};
use crate::config::functions::FunctionKind;

pub(super) async fn run(service: &FunctionService, attempt: &Attempt<'_>, plan: VariantPlan<'_>) -> RunResult {
    let prepared = prepare(service.functions(), plan, attempt.call).map_err(RunError::Request)?;
    let call = service.call_with_retries(attempt, plan.config, &prepared).await?;
    Ok(answer_of(plan.kind, prepared, call))
}

pub(super) async fn stream(
    service: &FunctionService,
    attempt: &Attempt<'_>,
    plan: VariantPlan<'_>,
    inference_id: uuid::Uuid,
) -> Result<FunctionChunks, RunError> {
    let prepared = prepare(service.functions(), plan, attempt.call).map_err(RunError::Request)?;
    service
        .stream_prepared(attempt, plan, prepared, inference_id, Vec::new())
        .await
}

/// The function's answer from one model call.
pub(super) fn answer_of(kind: FunctionKind, prepared: PreparedCall, call: ModelCall) -> VariantAnswer {
    let choice = call.response.choices.first();
    VariantAnswer {
        output: function_output(kind, choice, &prepared.rules),
        auxiliary_content: Vec::new(),
        finish_reason: choice.and_then(|c| c.finish_reason),
        original_response: call.response.raw_response.clone(),
        model_calls: vec![call],
        prepared,
    }
}
