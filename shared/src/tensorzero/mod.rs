//! The TensorZero-style function layer's compiled configuration: functions with their schemas
//! and variants, tools, templates, and the variant sampler. Built once at start-up by
//! [`crate::app::load_config`]; the `/inference` endpoint reads it.

pub mod batch_request;
pub mod dicl;
pub mod experiments;
pub mod feedback;
pub mod function_calls;
pub(crate) mod openai_compat;
mod sampler;
mod schemas;
mod tags;
mod templates;

pub(crate) use sampler::VariantPolicy;
pub(crate) use schemas::CompiledSchema;
pub use templates::TemplateInput;
pub(crate) use templates::{TemplateError, TemplateSet};

use crate::config::functions::{ChatCompletionConfig, FunctionConfig, FunctionKind, JsonMode, VariantConfig};
use crate::config::{normalise_config_path, Config, ConfigError, ToolConfig, DEFAULT_SYSTEM_INSTRUCTIONS};
use crate::user_text::excerpt;
use dicl::DiclSettings;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use uuid::Uuid;

/// Every function and tool of a configuration, compiled.
#[derive(Debug, Default)]
pub struct FunctionSet {
    functions: BTreeMap<String, Function>,
    tools: BTreeMap<String, Tool>,
    templates: TemplateSet,
    /// The functions' adaptive experiments.
    experiments: Vec<experiments::Experiment>,
    /// Every `[models.M]` and the names of its providers: what request edits may be scoped to.
    models: BTreeMap<String, BTreeSet<String>>,
}

/// One function, its compiled schemas and its variants.
#[derive(Debug)]
pub struct Function {
    pub name: String,
    pub config: FunctionConfig,
    schemas: BTreeMap<String, CompiledSchema>,
    output_schema: Option<Arc<CompiledSchema>>,
    variants: BTreeMap<String, Variant>,
    policy: VariantPolicy,
}

/// One variant.
#[derive(Debug)]
pub struct Variant {
    pub name: String,
    /// The variant's own model call: the variant itself, or its judge or fuser.
    pub config: ChatCompletionConfig,
    /// The variant as configured (its type, candidates and time limits).
    pub definition: VariantConfig,
    /// The effective json mode: the configured one, `strict` by default for json functions,
    /// `None` for chat functions.
    pub json_mode: Option<JsonMode>,
    /// A DICL variant's retrieval settings (`config` is then its generation call).
    pub dicl: Option<Arc<DiclSettings>>,
}

/// One `[tools.T]`, its parameters schema compiled.
#[derive(Debug)]
pub struct Tool {
    pub name: String,
    pub config: ToolConfig,
    pub parameters: Arc<CompiledSchema>,
}

/// Lookups a request can fail (mapped to 404 by the endpoint).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FunctionLookupError {
    #[error("unknown function `{}`", excerpt(.0))]
    UnknownFunction(String),
    #[error("unknown variant `{}` of function `{function}`", excerpt(.variant))]
    UnknownVariant { function: String, variant: String },
}

/// Looks up the text of a referenced file by the key that names it.
struct Files<'a>(&'a BTreeMap<String, String>);

impl Files<'_> {
    fn text(&self, key: &str, path: &str) -> Result<&str, ConfigError> {
        let path = normalise_config_path(key, path)?;
        self.0
            .get(&path)
            .map(String::as_str)
            .ok_or_else(|| ConfigError::invalid(key, format!("file `{path}` was not loaded")))
    }

    fn schema(&self, key: &str, path: &str) -> Result<CompiledSchema, ConfigError> {
        CompiledSchema::from_json_text(self.text(key, path)?)
            .map_err(|e| ConfigError::invalid(key, format!("`{path}`: {e}")))
    }
}

impl FunctionSet {
    /// Compile the functions and tools of a validated `config`; `files` maps each normalised
    /// referenced path ([`Config::referenced_files`]) to its text.
    pub fn compile(config: &Config, files: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let files = Files(files);
        let mut set = FunctionSet::default();
        for (name, model) in &config.models {
            set.models
                .insert(name.clone(), model.providers.keys().cloned().collect());
        }
        for (name, tool) in &config.tools {
            let parameters = files.schema(&format!("tools.{name}.parameters"), &tool.parameters)?;
            let tool = Tool {
                name: name.clone(),
                config: tool.clone(),
                parameters: Arc::new(parameters),
            };
            set.tools.insert(name.clone(), tool);
        }
        for (name, function) in &config.functions {
            let compiled = set.compile_function(name, function, &files)?;
            set.functions.insert(name.clone(), compiled);
        }
        set.experiments = experiments::experiments_of(&set, &config.metrics);
        Ok(set)
    }

    fn compile_function(
        &mut self,
        name: &str,
        config: &FunctionConfig,
        files: &Files<'_>,
    ) -> Result<Function, ConfigError> {
        let key = format!("functions.{name}");
        let mut schemas = BTreeMap::new();
        for (schema, suffix, path) in config.schema_paths() {
            schemas.insert(schema, files.schema(&format!("{key}.{suffix}"), path)?);
        }
        let output_schema = match (config.kind, &config.output_schema) {
            (FunctionKind::Json, Some(path)) => Some(Arc::new(files.schema(&format!("{key}.output_schema"), path)?)),
            (FunctionKind::Json, None) => Some(Arc::new(
                CompiledSchema::compile(serde_json::json!({}))
                    .map_err(|e| ConfigError::invalid(format!("{key}.output_schema"), e.to_string()))?,
            )),
            (FunctionKind::Chat, _) => None,
        };
        let mut variants = BTreeMap::new();
        for (variant_name, definition) in &config.variants {
            let variant = definition.prompt();
            for (template, suffix, path) in variant.template_paths() {
                let template_key = format!("{key}.variants.{variant_name}.{suffix}");
                let source = files.text(&template_key, path)?.to_owned();
                self.templates
                    .add(name, variant_name, &template, source)
                    .map_err(|e| ConfigError::invalid(&template_key, format!("`{path}`: {e}")))?;
            }
            let json_mode = match config.kind {
                FunctionKind::Json => Some(variant.json_mode.unwrap_or(JsonMode::Strict)),
                FunctionKind::Chat => None,
            };
            let dicl = match definition {
                VariantConfig::DynamicInContextLearning(dicl) => {
                    let instructions = match &dicl.system_instructions {
                        Some(path) => {
                            files.text(&format!("{key}.variants.{variant_name}.system_instructions"), path)?
                        }
                        None => DEFAULT_SYSTEM_INSTRUCTIONS,
                    };
                    Some(Arc::new(DiclSettings::new(dicl, instructions.to_owned())))
                }
                _ => None,
            };
            let compiled = Variant {
                name: variant_name.clone(),
                config: variant.clone(),
                definition: definition.clone(),
                json_mode,
                dicl,
            };
            variants.insert(variant_name.clone(), compiled);
        }
        Ok(Function {
            name: name.to_owned(),
            config: config.clone(),
            schemas,
            output_schema,
            variants,
            policy: VariantPolicy::from_function(config),
        })
    }

    pub fn function(&self, name: &str) -> Result<&Function, FunctionLookupError> {
        self.functions
            .get(name)
            .ok_or_else(|| FunctionLookupError::UnknownFunction(name.to_owned()))
    }

    pub fn functions(&self) -> impl Iterator<Item = &Function> {
        self.functions.values()
    }

    /// The functions' adaptive experiments.
    pub(crate) fn experiments(&self) -> &[experiments::Experiment] {
        &self.experiments
    }

    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.get(name)
    }

    /// Render template `template` of `variant` of `function`.
    pub fn render(
        &self,
        function: &str,
        variant: &str,
        template: &str,
        input: TemplateInput<'_>,
    ) -> Result<String, TemplateError> {
        self.templates.render(function, variant, template, input)
    }

    pub(crate) fn has_template(&self, function: &str, variant: &str, template: &str) -> bool {
        self.templates.contains(function, variant, template)
    }

    /// Whether `model` names a model (configured, or a valid `provider::model` shorthand) and,
    /// with `provider`, whether that model has a provider of that name.
    pub(crate) fn has_model_provider(&self, model: &str, provider: Option<&str>) -> bool {
        if let Some(providers) = self.models.get(model) {
            return provider.is_none_or(|p| providers.contains(p));
        }
        match crate::config::shorthand_model(model) {
            Ok(shorthand) => provider.is_none_or(|p| shorthand.providers.contains_key(p)),
            Err(_) => false,
        }
    }
}

impl Function {
    /// The variant `name` (a pin: no sampling, no fallback).
    pub fn variant(&self, name: &str) -> Result<&Variant, FunctionLookupError> {
        self.variants
            .get(name)
            .ok_or_else(|| FunctionLookupError::UnknownVariant {
                function: self.name.clone(),
                variant: name.to_owned(),
            })
    }

    pub fn variants(&self) -> impl Iterator<Item = &Variant> {
        self.variants.values()
    }

    pub fn policy(&self) -> &VariantPolicy {
        &self.policy
    }

    /// The variant to try for `episode_id` once the variants in `failed` have failed; `None`
    /// when none is left.
    pub(crate) fn choose_variant(&self, episode_id: Uuid, failed: &BTreeSet<String>) -> Option<&Variant> {
        self.choose_bound_variant(episode_id, failed, None)
    }

    /// [`Self::choose_variant`] for an episode `bound` to a variant by an adaptive experiment:
    /// that one first, then the fallbacks in order, then the other candidates.
    pub(crate) fn choose_bound_variant(
        &self,
        episode_id: Uuid,
        failed: &BTreeSet<String>,
        bound: Option<&str>,
    ) -> Option<&Variant> {
        let name = self.policy.choose(&self.name, episode_id, failed, bound)?;
        self.variants.get(name)
    }

    /// The function's adaptive experiment, if it has one.
    pub fn adaptive(&self) -> Option<&crate::config::experimentation::AdaptiveExperimentation> {
        self.config.experimentation.as_ref()?.adaptive()
    }

    /// The schema `name` (`system`, `user`, `assistant` or a named one), if the function has it.
    pub fn schema(&self, name: &str) -> Option<&CompiledSchema> {
        self.schemas.get(name)
    }

    /// json functions: the output schema (`{}` when none is configured).
    pub fn output_schema(&self) -> Option<&Arc<CompiledSchema>> {
        self.output_schema.as_ref()
    }
}

#[cfg(test)]
mod tests;
