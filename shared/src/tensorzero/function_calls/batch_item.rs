//! The items of a `/batch_inference` batch: one variant for the whole batch (pinned, or drawn
//! with the first episode id), every item checked against it before anything is queued, and each
//! item run later by a queue worker on that variant alone (no fallback, no cache). The record is
//! handed back rather than written after a response: the worker stores it before the item counts.

use super::checks::FunctionChecks;
use super::error::{FunctionError, VariantFailure};
use super::model_call::ModelCall;
use super::output::function_output;
use super::persist::Finished;
use super::prepare::{prepare, PreparedCall, VariantPlan};
use super::service::FunctionService;
use super::validate::{InferenceCall, InferenceTarget};
use crate::model::{ModelRequest, ModelResponse};
use crate::ports::inference_records::InferenceRecord;
use crate::ports::ProjectId;
use crate::user_text::excerpt;
use std::collections::BTreeSet;
use std::time::Instant;
use uuid::Uuid;

/// The variant a batch runs, and the model it calls (whose concurrency slots the items take).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BatchVariant {
    pub name: String,
    pub model: String,
}

impl FunctionChecks {
    /// The variant of `function` a batch runs: `pinned` (404 when unknown), else the one drawn
    /// for `first_episode`, as `/inference` would draw it.
    pub(crate) fn batch_variant(
        &self,
        function: &str,
        pinned: Option<&str>,
        first_episode: Uuid,
    ) -> Result<BatchVariant, FunctionError> {
        let found = self
            .functions()
            .function(function)
            .map_err(|_| FunctionError::UnknownFunction(function.to_owned()))?;
        let variant = match pinned {
            Some(name) => found.variant(name).map_err(|_| FunctionError::UnknownVariant {
                function: function.to_owned(),
                variant: name.to_owned(),
            })?,
            None => found.choose_variant(first_episode, &BTreeSet::new()).ok_or_else(|| {
                FunctionError::invalid(format!(
                    "Function `{}` has no variant that can be sampled",
                    excerpt(function)
                ))
            })?,
        };
        if let Some(error) = super::variants::unsupported_for_batch(variant) {
            return Err(error);
        }
        Ok(BatchVariant {
            name: variant.name.clone(),
            model: variant.config.model.clone(),
        })
    }

    /// Everything the worker will check before calling the model (input schemas, templates,
    /// tools, the output schema), done now so that a bad item fails the submission.
    pub(crate) fn check_batch_item(&self, call: &InferenceCall) -> Result<(), FunctionError> {
        self.prepare_batch_item(call).map(|_| ())
    }

    /// The item's variant (it must be pinned) and its prepared model request.
    pub(super) fn prepare_batch_item<'a>(
        &'a self,
        call: &'a InferenceCall,
    ) -> Result<(VariantPlan<'a>, PreparedCall), FunctionError> {
        let (InferenceTarget::Function(function), Some(variant)) = (&call.target, &call.variant_name) else {
            return Err(FunctionError::invalid(
                "a batch item needs a function and its batch's variant",
            ));
        };
        let found = self
            .functions()
            .function(function)
            .map_err(|_| FunctionError::UnknownFunction(function.clone()))?;
        let chosen = found.variant(variant).map_err(|_| FunctionError::UnknownVariant {
            function: function.clone(),
            variant: variant.clone(),
        })?;
        if let Some(error) = super::variants::unsupported_for_batch(chosen) {
            return Err(error);
        }
        let plan = VariantPlan::for_variant(found, chosen);
        let prepared = prepare(self.functions(), plan, call)?;
        Ok((plan, prepared))
    }
}

impl FunctionService {
    /// Run one item on its pinned variant: the variant's timeout and retries apply, no other
    /// variant is tried, nothing is cached. The record to store, or why there is none.
    pub(crate) async fn infer_batch_item(
        &self,
        project: &ProjectId,
        call: &InferenceCall,
        inference_id: Uuid,
    ) -> Result<InferenceRecord, FunctionError> {
        let started = Instant::now();
        let (plan, prepared) = self.checks().prepare_batch_item(call)?;
        let model_call = self
            .call_with_retries(&super::variants::Attempt::new(project, call), plan.config, &prepared)
            .await
            .map_err(|(failure, _)| {
                FunctionError::AllVariantsFailed(vec![VariantFailure {
                    variant: plan.variant_name.to_owned(),
                    ..failure
                }])
            })?;
        Ok(self.batch_item_record(project, call, inference_id, (plan, &prepared), &model_call, started))
    }

    /// The model request an item sends, for a provider's own batch API: what
    /// [`Self::infer_batch_item`] would send.
    pub(crate) fn batch_item_request(&self, call: &InferenceCall) -> Result<ModelRequest, FunctionError> {
        self.checks()
            .prepare_batch_item(call)
            .map(|(_, prepared)| prepared.request)
    }

    /// The record of an item whose model answered through a provider's own batch API
    /// (`provider`): built exactly as [`Self::infer_batch_item`] builds it.
    pub(crate) fn native_batch_item_record(
        &self,
        project: &ProjectId,
        call: &InferenceCall,
        inference_id: Uuid,
        provider: &str,
        response: ModelResponse,
    ) -> Result<InferenceRecord, FunctionError> {
        let started = Instant::now();
        let (plan, prepared) = self.checks().prepare_batch_item(call)?;
        let model_call = ModelCall {
            id: self.new_id(),
            model: prepared.request.model.clone(),
            provider: provider.to_owned(),
            response,
            latency: std::time::Duration::ZERO,
            ttft: None,
            cached: false,
        };
        Ok(self.batch_item_record(project, call, inference_id, (plan, &prepared), &model_call, started))
    }

    fn batch_item_record(
        &self,
        project: &ProjectId,
        call: &InferenceCall,
        inference_id: Uuid,
        (plan, prepared): (VariantPlan<'_>, &PreparedCall),
        model_call: &ModelCall,
        started: Instant,
    ) -> InferenceRecord {
        let choice = model_call.response.choices.first();
        let output = function_output(plan.kind, choice, &prepared.rules);
        let finish_reason = choice.and_then(|c| c.finish_reason);
        let usage = model_call.response.usage.clone();
        self.persistence().build_record(Finished {
            project,
            call,
            prepared,
            inference_id,
            function_name: plan.function_name,
            variant_name: plan.variant_name,
            kind: plan.kind,
            output: &output,
            usage: &usage,
            finish_reason,
            model_calls: std::slice::from_ref(model_call),
            auxiliary_content: &[],
            processing_time: started.elapsed(),
        })
    }
}
