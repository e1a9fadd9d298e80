//! The function layer's checks over the configuration alone: which function or model a call
//! runs, which variant, and whether its model request can be prepared (input schemas,
//! templates, tools, the output schema), without calling a model. What a submission is checked
//! with where no model is called (`/async_predict`, `/batch_inference`), and what
//! [`FunctionService`](super::FunctionService) runs calls with.

use super::error::FunctionError;
use super::prepare::{prepare, VariantPlan, DEFAULT_FUNCTION};
use super::validate::{InferenceCall, InferenceTarget};
use crate::config::functions::FunctionKind;
use crate::ports::{Clock, IdSource};
use crate::tensorzero::{Function, FunctionSet};
use std::collections::BTreeSet;
use std::sync::Arc;
use uuid::Uuid;

/// What `call` runs: a configured function or the passthrough for a model.
#[derive(Clone, Copy)]
pub(super) enum Resolved<'a> {
    Function(&'a Function),
    Model(&'a str),
}

impl Resolved<'_> {
    pub(super) fn name(&self) -> &str {
        match self {
            Self::Function(f) => &f.name,
            Self::Model(_) => DEFAULT_FUNCTION,
        }
    }
}

/// The configured functions, with the clock and ids a call is built with.
#[derive(Clone)]
pub struct FunctionChecks {
    functions: Arc<FunctionSet>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdSource>,
}

impl FunctionChecks {
    pub fn new(functions: Arc<FunctionSet>, clock: Arc<dyn Clock>, ids: Arc<dyn IdSource>) -> Self {
        Self { functions, clock, ids }
    }

    pub fn functions(&self) -> &FunctionSet {
        &self.functions
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_unix_ms()
    }

    pub(crate) fn new_id(&self) -> Uuid {
        self.ids.new_uuid()
    }

    pub(super) fn resolve<'a>(&'a self, call: &'a InferenceCall) -> Result<Resolved<'a>, FunctionError> {
        match &call.target {
            InferenceTarget::Function(name) => {
                let function = self
                    .functions
                    .function(name)
                    .map_err(|_| FunctionError::UnknownFunction(name.clone()))?;
                if let Some(variant) = &call.variant_name {
                    function.variant(variant).map_err(|_| FunctionError::UnknownVariant {
                        function: name.clone(),
                        variant: variant.clone(),
                    })?;
                }
                for edit in call.extra_body.iter().chain(&call.extra_headers) {
                    if let super::validate::EditScope::Variant(variant) = &edit.scope {
                        if function.variant(variant).is_err() {
                            return Err(FunctionError::invalid(format!(
                                "`extra_body`/`extra_headers` name variant `{}`, which function `{}` does not have",
                                crate::user_text::excerpt(variant),
                                crate::user_text::excerpt(name)
                            )));
                        }
                    }
                }
                Ok(Resolved::Function(function))
            }
            InferenceTarget::Model(model) => Ok(Resolved::Model(model)),
        }
    }

    /// The next variant to try, or `None` when none is left.
    pub(super) fn next_plan<'a>(
        &'a self,
        target: Resolved<'a>,
        call: &'a InferenceCall,
        failed: &BTreeSet<String>,
    ) -> Option<VariantPlan<'a>> {
        match target {
            Resolved::Model(model) => (!failed.contains(model)).then_some(VariantPlan {
                function_name: DEFAULT_FUNCTION,
                variant_name: model,
                kind: FunctionKind::Chat,
                model,
                config: None,
                function: None,
            }),
            Resolved::Function(function) => {
                let variant = match &call.variant_name {
                    Some(pinned) if failed.contains(pinned) => return None,
                    Some(pinned) => function.variant(pinned).ok()?,
                    None => function.choose_variant(call.episode_id, failed)?,
                };
                Some(VariantPlan::for_variant(function, variant))
            }
        }
    }

    /// Check `call` as [`FunctionService::infer`](super::FunctionService::infer) would before calling a model (the function, the pinned
    /// variant, input schemas, templates, tools, the output schema) without calling one: what
    /// `/async_predict` runs at submission. With no pinned variant, the one drawn for the call's
    /// episode is checked.
    pub fn check(&self, call: &InferenceCall) -> Result<(), FunctionError> {
        let target = self.resolve(call)?;
        if let Some(plan) = self.next_plan(target, call, &BTreeSet::new()) {
            prepare(&self.functions, plan, call)?;
        }
        Ok(())
    }
}
