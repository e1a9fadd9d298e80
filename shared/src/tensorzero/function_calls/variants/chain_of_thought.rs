//! `experimental_chain_of_thought` (json functions): one call whose output schema is wrapped as
//! `{"thinking": …, "response": <the schema>}`. The answer is `response`; `thinking` is stored
//! as a thought beside the output, not returned. No prompt text is added; request parameters
//! apply. Not streamed.

use super::super::error::FunctionError;
use super::super::output::{FunctionOutput, OutputBlock};
use super::super::prepare::VariantPlan;
use super::super::service::FunctionService;
use super::{chat_completion, Attempt, RunError, RunResult, VariantAnswer};
use crate::tensorzero::CompiledSchema;
use serde_json::{json, Value};
use std::sync::Arc;

pub(super) async fn run(service: &FunctionService, attempt: &Attempt<'_>, plan: VariantPlan<'_>) -> RunResult {
    let original = attempt
        .call
        .output_schema
        .clone()
        .or_else(|| plan.function.and_then(|f| f.output_schema().cloned()));
    let inner = original
        .as_ref()
        .map(|s| s.value().clone())
        .unwrap_or_else(|| json!({}));
    let wrapped = CompiledSchema::compile(wrapped_schema(inner))
        .map_err(|e| RunError::Request(FunctionError::invalid(format!("`output_schema`: {e}"))))?;
    let mut call = attempt.call.clone();
    call.output_schema = Some(Arc::new(wrapped));
    let wrapped_attempt = Attempt {
        call: &call,
        ..attempt.clone()
    };
    let mut answer = chat_completion::run(service, &wrapped_attempt, plan).await?;
    answer.prepared.rules.output_schema = original;
    unwrap_thinking(&mut answer);
    Ok(answer)
}

/// `schema` as the `response` of an object that also carries the reasoning.
pub(super) fn wrapped_schema(schema: Value) -> Value {
    json!({
        "type": "object",
        "properties": {
            "thinking": {
                "type": "string",
                "description": "A detailed account of the reasoning that leads to the response."
            },
            "response": schema
        },
        "required": ["thinking", "response"],
        "additionalProperties": false
    })
}

/// The answer's `response` as its output and `thinking` as a stored thought; an answer that
/// did not parse against the wrapped schema passes through unchanged.
pub(super) fn unwrap_thinking(answer: &mut VariantAnswer) {
    let FunctionOutput::Json(output) = &mut answer.output else {
        return;
    };
    let Some(Value::Object(fields)) = &output.parsed else {
        return;
    };
    let (Some(Value::String(thinking)), Some(response)) = (fields.get("thinking"), fields.get("response")) else {
        return;
    };
    answer.auxiliary_content = vec![OutputBlock::Thought {
        text: thinking.clone(),
        signature: None,
    }];
    let response = response.clone();
    output.raw = Some(response.to_string());
    output.parsed = Some(response);
}
