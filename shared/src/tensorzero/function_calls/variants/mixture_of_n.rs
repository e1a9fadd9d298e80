//! `experimental_mixture_of_n`: the candidates, then a fuser that reads them after the
//! conversation and writes the answer, as a normal request for the function (its tools, its
//! output schema). When the fuser fails or no candidate is readable, a random candidate's
//! answer. Calls are stored fuser first, then the candidates. Streamed, the fuser streams for
//! real; a lone candidate or a fallback pick is sent as one chunk.

use super::super::model_call::ModelCall;
use super::super::prepare::{prepare, PreparedCall, VariantPlan};
use super::super::service::FunctionService;
use super::super::validate::InferenceCall;
use super::candidates::{add_candidates, pick, random_index, readable, run_candidates};
use super::chat_completion::answer_of;
use super::{prompt_plan, Attempt, FunctionChunks, RunError, RunResult, VariantAnswer};
use crate::config::functions::MixtureOfNConfig;
use uuid::Uuid;

/// A mixture's answer when streamed.
pub(super) enum Fused {
    /// The fuser is streaming.
    Streaming(FunctionChunks),
    /// A whole answer (a lone candidate, or a random pick after the fuser failed).
    Whole(Box<VariantAnswer>),
}

pub(super) async fn run(
    service: &FunctionService,
    attempt: &Attempt<'_>,
    plan: VariantPlan<'_>,
    config: &MixtureOfNConfig,
) -> RunResult {
    let mut candidates = run_candidates(service, attempt, plan, &config.candidates).await?;
    if candidates.len() == 1 {
        if let Some(only) = candidates.pop() {
            return Ok(only);
        }
    }
    let fuser_plan = prompt_plan(plan, &config.fuser);
    let Some((call, prepared)) = fuser_parts(service, attempt.call, fuser_plan, &candidates, false) else {
        return Ok(random_pick(candidates));
    };
    let fuser_attempt = Attempt {
        call: &call,
        ..attempt.clone()
    };
    match service
        .call_with_retries(&fuser_attempt, fuser_plan.config, &prepared)
        .await
    {
        Ok(model_call) => Ok(fused(plan, prepared, model_call, candidates)),
        Err((failure, _)) => {
            tracing::warn!(message = %failure.message, "the mixture-of-n fuser failed: picking a candidate at random");
            Ok(random_pick(candidates))
        }
    }
}

pub(super) async fn stream(
    service: &FunctionService,
    attempt: &Attempt<'_>,
    plan: VariantPlan<'_>,
    config: &MixtureOfNConfig,
    inference_id: Uuid,
) -> Result<Fused, RunError> {
    let mut candidates = run_candidates(service, attempt, plan, &config.candidates).await?;
    if candidates.len() == 1 {
        if let Some(only) = candidates.pop() {
            return Ok(Fused::Whole(Box::new(only)));
        }
    }
    let fuser_plan = prompt_plan(plan, &config.fuser);
    let Some((call, prepared)) = fuser_parts(service, attempt.call, fuser_plan, &candidates, true) else {
        return Ok(Fused::Whole(Box::new(random_pick(candidates))));
    };
    let fuser_attempt = Attempt {
        call: &call,
        ..attempt.clone()
    };
    let earlier: Vec<ModelCall> = candidates.iter().flat_map(|c| c.model_calls.clone()).collect();
    match service
        .stream_prepared(&fuser_attempt, fuser_plan, prepared, inference_id, earlier)
        .await
    {
        Ok(chunks) => Ok(Fused::Streaming(chunks)),
        Err(RunError::Failed(failure, _)) => {
            tracing::warn!(message = %failure.message, "the mixture-of-n fuser failed: picking a candidate at random");
            Ok(Fused::Whole(Box::new(random_pick(candidates))))
        }
        Err(error) => Err(error),
    }
}

/// The fuser's answer, with its call stored first and the candidates' after it.
fn fused(
    plan: VariantPlan<'_>,
    prepared: PreparedCall,
    model_call: ModelCall,
    candidates: Vec<VariantAnswer>,
) -> VariantAnswer {
    let mut answer = answer_of(plan.kind, prepared, model_call);
    for candidate in candidates {
        answer.model_calls.extend(candidate.model_calls);
    }
    answer
}

/// A random candidate, with no `original_response` (the fuser wrote nothing).
pub(super) fn random_pick(candidates: Vec<VariantAnswer>) -> VariantAnswer {
    let index = random_index(candidates.len());
    let mut answer = pick(candidates, index);
    answer.original_response = None;
    answer
}

/// The fuser's call and request, or `None` when there is none to make (no readable candidate,
/// inference-level `extra_body`, a request that cannot be prepared).
fn fuser_parts(
    service: &FunctionService,
    call: &InferenceCall,
    fuser_plan: VariantPlan<'_>,
    candidates: &[VariantAnswer],
    stream: bool,
) -> Option<(InferenceCall, PreparedCall)> {
    let readable = readable(candidates);
    if readable.is_empty() {
        return None;
    }
    if !call.extra_body.is_empty() {
        tracing::warn!("inference-level extra_body is not supported for the mixture-of-n fuser");
        return None;
    }
    let fuser_call = fuser_call(call, stream);
    let texts: Vec<&str> = readable.iter().map(|(_, text)| text.as_str()).collect();
    match fuser_request(service.functions(), fuser_plan, &fuser_call, &texts) {
        Ok(prepared) => Some((fuser_call, prepared)),
        Err(error) => {
            tracing::warn!(%error, "the mixture-of-n fuser's request could not be prepared");
            None
        }
    }
}

/// The request as the fuser sees it: the fuser's own parameters only (not the request's).
pub(super) fn fuser_call(call: &InferenceCall, stream: bool) -> InferenceCall {
    let mut fuser = call.clone();
    fuser.params = Default::default();
    fuser.stream = stream;
    fuser
}

/// The fuser's model request: a normal request for the function through the fuser's templates,
/// wrapped in the fusing instructions, with the candidates as a last user message.
pub(super) fn fuser_request(
    functions: &crate::tensorzero::FunctionSet,
    fuser_plan: VariantPlan<'_>,
    call: &InferenceCall,
    candidates: &[&str],
) -> Result<PreparedCall, super::super::error::FunctionError> {
    let mut prepared = prepare(functions, fuser_plan, call)?;
    let system = fuser_system(prepared.request.system.take());
    add_candidates(&mut prepared.request, system, fuser_candidates(candidates));
    Ok(prepared)
}

pub(super) fn fuser_system(own: Option<String>) -> String {
    let problem = match own {
        Some(own) => format!("Several models were given the problem below.\n{own}\n\n"),
        None => "Several models answered the latest request in the conversation.\n\n".to_owned(),
    };
    format!(
        "{problem}Your task is to combine their answers into one. Weigh them critically, since some may be \
         wrong or biased, and write a single answer of your own that is accurate, complete and well \
         organised, rather than a copy of any one of them.\n\
         The conversation comes first; its last message holds the candidate answers."
    )
}

pub(super) fn fuser_candidates(candidates: &[&str]) -> String {
    let mut text = String::from("The candidate answers:\n");
    for (index, candidate) in candidates.iter().enumerate() {
        text.push_str(&format!("{index}:\n{candidate}\n------\n"));
    }
    text
}
