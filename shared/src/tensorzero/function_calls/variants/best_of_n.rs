//! `experimental_best_of_n_sampling`: the candidates, then a judge (the `evaluator`) that reads
//! them after the conversation and answers `{"thinking": …, "answer_choice": i}`. The chosen
//! candidate's answer is returned; when the judge fails or its answer is unusable, a random
//! candidate's. Calls are stored chosen candidate first, then the others, then the judge.

use super::super::error::FunctionError;
use super::super::model_call::ModelCall;
use super::super::prepare::{prepare, PreparedCall, VariantPlan};
use super::super::service::FunctionService;
use super::super::validate::InferenceCall;
use super::candidates::{add_candidates, pick, random_index, readable, run_candidates};
use super::{prompt_plan, Attempt, RunResult, VariantAnswer};
use crate::config::functions::{BestOfNConfig, FunctionKind};
use crate::model::{ContentBlock, ModelResponse};
use crate::tensorzero::CompiledSchema;
use serde_json::{json, Value};
use std::sync::{Arc, LazyLock};

/// What the judge must answer.
static JUDGE_SCHEMA: LazyLock<Option<Arc<CompiledSchema>>> = LazyLock::new(|| {
    let schema = json!({
        "type": "object",
        "properties": {
            "thinking": {"type": "string"},
            "answer_choice": {"type": "integer"}
        },
        "required": ["thinking", "answer_choice"],
        "additionalProperties": false
    });
    CompiledSchema::compile(schema).ok().map(Arc::new)
});

pub(super) async fn run(
    service: &FunctionService,
    attempt: &Attempt<'_>,
    plan: VariantPlan<'_>,
    config: &BestOfNConfig,
) -> RunResult {
    let mut candidates = run_candidates(service, attempt, plan, &config.candidates).await?;
    if candidates.len() == 1 {
        if let Some(only) = candidates.pop() {
            return Ok(only);
        }
    }
    let (choice, judge_call) = judge(service, attempt, prompt_plan(plan, &config.evaluator), &candidates).await;
    let index = choice.unwrap_or_else(|| random_index(candidates.len()));
    Ok(chosen(candidates, index, judge_call))
}

/// Candidate `index`'s answer; the judge's raw answer is its `original_response` (none when
/// the judge was not called or failed) and the judge's call is stored last.
pub(super) fn chosen(candidates: Vec<VariantAnswer>, index: usize, judge_call: Option<ModelCall>) -> VariantAnswer {
    let mut answer = pick(candidates, index);
    answer.original_response = judge_call.as_ref().and_then(|c| c.response.raw_response.clone());
    answer.model_calls.extend(judge_call);
    answer
}

/// The judge's choice (an index among all candidates) and its call, when one was made.
async fn judge(
    service: &FunctionService,
    attempt: &Attempt<'_>,
    judge_plan: VariantPlan<'_>,
    candidates: &[VariantAnswer],
) -> (Option<usize>, Option<ModelCall>) {
    let readable = readable(candidates);
    match readable.as_slice() {
        [] => return (None, None),
        [(only, _)] => return (Some(*only), None),
        _ => {}
    }
    if !attempt.call.extra_body.is_empty() {
        tracing::warn!("inference-level extra_body is not supported for the best-of-n judge: picking at random");
        return (None, None);
    }
    let Some(call) = judge_call(attempt.call) else {
        return (None, None);
    };
    let texts: Vec<&str> = readable.iter().map(|(_, text)| text.as_str()).collect();
    let prepared = match judge_request(service.functions(), judge_plan, &call, &texts) {
        Ok(prepared) => prepared,
        Err(error) => {
            tracing::warn!(%error, "the best-of-n judge's request could not be prepared: picking at random");
            return (None, None);
        }
    };
    let judge_attempt = Attempt {
        call: &call,
        ..attempt.clone()
    };
    let model_call = match service
        .call_with_retries(&judge_attempt, judge_plan.config, &prepared)
        .await
    {
        Ok(model_call) => model_call,
        Err((failure, _)) => {
            tracing::warn!(message = %failure.message, "the best-of-n judge failed: picking at random");
            return (None, None);
        }
    };
    let choice = answer_choice(&model_call.response).and_then(|i| readable.get(i).map(|(index, _)| *index));
    if choice.is_none() {
        tracing::warn!("the best-of-n judge's answer has no usable answer_choice: picking at random");
    }
    (choice, Some(model_call))
}

/// The request as the judge sees it: a json call with the judge's schema, the judge's own
/// parameters only (not the request's), no inference-level edits, not streamed.
pub(super) fn judge_call(call: &InferenceCall) -> Option<InferenceCall> {
    let mut judge = call.clone();
    judge.params = Default::default();
    judge.output_schema = Some(Arc::clone(JUDGE_SCHEMA.as_ref()?));
    judge.extra_body = Vec::new();
    judge.extra_headers = Vec::new();
    judge.additional_tools = Vec::new();
    judge.allowed_tools = None;
    judge.tool_choice = None;
    judge.parallel_tool_calls = None;
    judge.stream = false;
    Some(judge)
}

/// The judge's model request: its own templates over the conversation, wrapped in the judging
/// instructions, and the candidates as a last user message.
pub(super) fn judge_request(
    functions: &crate::tensorzero::FunctionSet,
    judge_plan: VariantPlan<'_>,
    call: &InferenceCall,
    candidates: &[&str],
) -> Result<PreparedCall, FunctionError> {
    let plan = VariantPlan {
        kind: FunctionKind::Json,
        ..judge_plan
    };
    let mut prepared = prepare(functions, plan, call)?;
    let system = judge_system(prepared.request.system.take(), candidates.len().saturating_sub(1));
    add_candidates(&mut prepared.request, system, judge_candidates(candidates));
    Ok(prepared)
}

pub(super) fn judge_system(own: Option<String>, max_index: usize) -> String {
    let problem = match own {
        Some(own) => format!("You are judging candidate answers to the problem below.\n{own}\n\n"),
        None => "You are judging candidate answers to a problem.\n\n".to_owned(),
    };
    format!(
        "{problem}The messages that follow are the conversation so far between the user and the assistant, \
         then a last message listing the candidate answers.\n\
         Answer in JSON with two keys: `thinking`, your reasoning, and `answer_choice`, the index of the best \
         candidate (an integer from 0 to {max_index}).\n\
         In `thinking`, first examine each candidate against the conversation, then argue which one is best: \
         the most correct and the most faithful to the instructions."
    )
}

pub(super) fn judge_candidates(candidates: &[&str]) -> String {
    let mut text = String::from("The candidate answers:\n");
    for (index, candidate) in candidates.iter().enumerate() {
        text.push_str(&format!("{index}: {candidate}\n------\n"));
    }
    text.push_str("Give the index of the best candidate as `answer_choice`.");
    text
}

/// `answer_choice` from the judge's first text block (or tool-call arguments; thoughts are
/// skipped), when it is a non-negative integer.
pub(super) fn answer_choice(response: &ModelResponse) -> Option<usize> {
    let content = &response.choices.first()?.content;
    let raw = content.iter().find_map(|block| match block {
        ContentBlock::Text { text } | ContentBlock::Refusal { text } => Some(text.as_str()),
        ContentBlock::ToolCall { arguments, .. } => Some(arguments.as_str()),
        _ => None,
    })?;
    let parsed: Value = serde_json::from_str(raw).ok()?;
    usize::try_from(parsed.get("answer_choice")?.as_u64()?).ok()
}
