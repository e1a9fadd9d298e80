//! The function layer's checks over the configuration alone: which function or model a call
//! runs, which variant, and whether its model request can be prepared (input schemas,
//! templates, tools, the output schema), without calling a model. What a submission is checked
//! with where no model is called (`/async_predict`, `/batch_inference`), and what
//! [`FunctionService`](super::FunctionService) runs calls with.

use super::error::FunctionError;
use super::prepare::{prepare, VariantPlan, DEFAULT_FUNCTION};
use super::validate::{InferenceCall, InferenceTarget};
use crate::config::functions::FunctionKind;
use crate::ports::{Clock, IdSource, ProjectId};
use crate::tensorzero::experiments::Experiments;
use crate::tensorzero::{Function, FunctionSet};
use std::collections::BTreeSet;
use std::sync::Arc;
use uuid::Uuid;

/// What `call` runs: a configured function (with the variant its episode is bound to by an
/// adaptive experiment, if it is) or the passthrough for a model.
#[derive(Clone, Copy)]
pub(super) enum Resolved<'a> {
    Function(&'a Function, Option<&'a str>),
    Model(&'a str),
}

impl Resolved<'_> {
    pub(super) fn name(&self) -> &str {
        match self {
            Self::Function(f, _) => &f.name,
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
    /// Adaptive experiments' episode bindings (none: their variants are drawn as static ones).
    experiments: Option<Arc<Experiments>>,
}

impl FunctionChecks {
    pub fn new(functions: Arc<FunctionSet>, clock: Arc<dyn Clock>, ids: Arc<dyn IdSource>) -> Self {
        Self {
            functions,
            clock,
            ids,
            experiments: None,
        }
    }

    /// Bind episodes of adaptive experiments through `experiments`.
    pub fn with_experiments(mut self, experiments: Arc<Experiments>) -> Self {
        self.experiments = Some(experiments);
        self
    }

    /// [`Self::resolve`], and for a function under an adaptive experiment (no pinned variant),
    /// the variant the call's episode is bound to.
    pub(super) async fn resolve_bound<'a>(
        &'a self,
        project: &ProjectId,
        call: &'a InferenceCall,
    ) -> Result<Resolved<'a>, FunctionError> {
        let resolved = self.resolve(call)?;
        let (Resolved::Function(function, _), None, Some(experiments)) =
            (resolved, &call.variant_name, &self.experiments)
        else {
            return Ok(resolved);
        };
        let bound = experiments.episode_variant(project, function, call.episode_id).await;
        let bound = bound
            .and_then(|name| function.variant(&name).ok())
            .map(|v| v.name.as_str());
        Ok(Resolved::Function(function, bound))
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
        self.check_model_scopes(call)?;
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
                Ok(Resolved::Function(function, None))
            }
            InferenceTarget::Model(model) => Ok(Resolved::Model(model)),
        }
    }

    /// Request edits scoped to a model (and provider) must name one that exists, as TensorZero
    /// checks them: a typo would otherwise silently edit nothing.
    fn check_model_scopes(&self, call: &InferenceCall) -> Result<(), FunctionError> {
        let lists = [("extra_body", &call.extra_body), ("extra_headers", &call.extra_headers)];
        for (list, edits) in lists {
            for (index, edit) in edits.iter().enumerate() {
                let super::validate::EditScope::Model { model, provider } = &edit.scope else {
                    continue;
                };
                if self.functions.has_model_provider(model, provider.as_deref()) {
                    continue;
                }
                let excerpt = crate::user_text::excerpt;
                return Err(FunctionError::invalid(match provider {
                    Some(provider) if self.functions.has_model_provider(model, None) => format!(
                        "`{list}[{index}].provider_name`: model `{}` has no provider `{}`",
                        excerpt(model),
                        excerpt(provider)
                    ),
                    _ => format!(
                        "`{list}[{index}].model_name`: model `{}` is not found in the model table",
                        excerpt(model)
                    ),
                }));
            }
        }
        Ok(())
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
            Resolved::Function(function, bound) => {
                let variant = match &call.variant_name {
                    Some(pinned) if failed.contains(pinned) => return None,
                    Some(pinned) => function.variant(pinned).ok()?,
                    None => function.choose_bound_variant(call.episode_id, failed, bound)?,
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
