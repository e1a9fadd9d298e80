//! What best-of-n and mixture-of-n share: the candidates run concurrently, each a whole
//! non-streamed inference of its variant with default parameters and its own cache-key
//! suffix; their answers as the judge or fuser reads them; and the random pick when the judge
//! or fuser gives no usable answer.

use super::super::error::{FailureKind, VariantFailure};
use super::super::output::FunctionOutput;
use super::super::prepare::VariantPlan;
use super::super::service::FunctionService;
use super::super::validate::InferenceCall;
use super::{Attempt, RunError, VariantAnswer};
use crate::model::{ContentBlock, Message, ModelRequest, Role};
use futures::future::join_all;

/// The call each candidate runs: the request without its `params` (candidates use their own
/// configuration) and not streamed.
pub(super) fn candidate_call(call: &InferenceCall) -> InferenceCall {
    let mut candidate = call.clone();
    candidate.params = Default::default();
    candidate.stream = false;
    candidate
}

/// Run every candidate of `names` at once; the answers of those that succeeded, in order.
/// None succeeding is the ensemble's failure (or the request's error when that is why).
pub(super) async fn run_candidates(
    service: &FunctionService,
    attempt: &Attempt<'_>,
    plan: VariantPlan<'_>,
    names: &[String],
) -> Result<Vec<VariantAnswer>, RunError> {
    let call = candidate_call(attempt.call);
    let attempts: Vec<Attempt<'_>> = (0..names.len())
        .map(|index| Attempt {
            project: attempt.project,
            call: &call,
            cache_suffix: Some(format!("candidate_{index}")),
        })
        .collect();
    let runs = names.iter().zip(&attempts).map(|(name, candidate)| async move {
        let variant = plan.function.and_then(|function| {
            let variant = function.variant(name).ok()?;
            Some(VariantPlan::for_variant(function, variant))
        });
        match variant {
            Some(candidate_plan) => service.run_variant(candidate, candidate_plan).await,
            None => Err(RunError::Failed(
                VariantFailure {
                    variant: name.clone(),
                    kind: FailureKind::Client,
                    message: format!("candidate `{name}` is not a variant of the function"),
                },
                None,
            )),
        }
    });
    let mut answers = Vec::new();
    let mut failures = Vec::new();
    let mut request_error = None;
    for (name, outcome) in names.iter().zip(join_all(runs).await) {
        match outcome {
            Ok(answer) => answers.push(answer),
            Err(RunError::Failed(failure, _)) => failures.push(VariantFailure {
                variant: name.clone(),
                ..failure
            }),
            Err(RunError::Request(error)) => {
                request_error.get_or_insert(error);
            }
        }
    }
    if !answers.is_empty() {
        return Ok(answers);
    }
    if let Some(error) = request_error {
        return Err(RunError::Request(error));
    }
    Err(RunError::Failed(all_failed(&failures), None))
}

/// Every candidate failed: their kind when they agree, the providers' otherwise.
fn all_failed(failures: &[VariantFailure]) -> VariantFailure {
    let first = failures.first().map(|f| f.kind).unwrap_or(FailureKind::Provider);
    let kind = if failures.iter().all(|f| f.kind == first) {
        first
    } else {
        FailureKind::Provider
    };
    let each: Vec<String> = failures
        .iter()
        .map(|f| format!("{}: {}", f.variant, f.message))
        .collect();
    VariantFailure {
        variant: String::new(),
        kind,
        message: format!("all candidates failed ({})", each.join("; ")),
    }
}

/// A candidate as the judge or fuser reads it: a chat answer's content blocks as JSON, a json
/// answer's raw text; `None` for a json answer that did not parse (it is left out).
pub(super) fn rendered(answer: &VariantAnswer) -> Option<String> {
    match &answer.output {
        FunctionOutput::Chat(blocks) => serde_json::to_string(blocks).ok(),
        FunctionOutput::Json(output) => output.parsed.as_ref().and(output.raw.clone()),
    }
}

/// The candidates the judge or fuser reads: `(index among all candidates, text)`.
pub(super) fn readable(candidates: &[VariantAnswer]) -> Vec<(usize, String)> {
    candidates
        .iter()
        .enumerate()
        .filter_map(|(index, answer)| rendered(answer).map(|text| (index, text)))
        .collect()
}

/// The judge's or fuser's own system text wrapped in `system`, and `candidates` as a last user
/// message after the conversation.
pub(super) fn add_candidates(request: &mut ModelRequest, system: String, candidates: String) {
    request.system = Some(system);
    request
        .messages
        .push(Message::new(Role::User, vec![ContentBlock::text_block(candidates)]));
}

/// A uniformly random index below `count` (at least one).
pub(super) fn random_index(count: usize) -> usize {
    rand::random_range(0..count.max(1))
}

/// The answer of candidate `index`, the other candidates' calls stored after its own.
pub(super) fn pick(mut candidates: Vec<VariantAnswer>, index: usize) -> VariantAnswer {
    let index = index.min(candidates.len().saturating_sub(1));
    let mut chosen = candidates.remove(index);
    for other in candidates {
        chosen.model_calls.extend(other.model_calls);
    }
    chosen
}
