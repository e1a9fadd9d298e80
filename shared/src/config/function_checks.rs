//! Checks of `[functions.*]` that need no file: value ranges and cross-references (models,
//! tools, variants, templates beside schemas). Files are read and compiled by `crate::tensorzero`.

use super::extras::{check_extra_body, check_extra_headers};
use super::functions::{ChatCompletionConfig, FunctionConfig, FunctionKind, ToolChoice, VariantConfig};
use super::shorthand::{resolve_model, ModelLookupError};
use super::{ConfigError, MetricConfig, ModelConfig, ToolConfig};
use std::collections::{BTreeMap, BTreeSet};

/// What a function's checks need from the rest of the config.
pub(crate) struct FunctionContext<'a> {
    pub models: &'a BTreeMap<String, ModelConfig>,
    pub tools: &'a BTreeMap<String, ToolConfig>,
    pub metrics: &'a BTreeMap<String, MetricConfig>,
}

fn check_name(key: &str, name: &str, what: &str) -> Result<(), ConfigError> {
    if name.is_empty() || name.len() > 256 {
        return Err(ConfigError::invalid(
            key,
            format!("{what} names must be 1 to 256 characters"),
        ));
    }
    if name.starts_with("tensorzero::") {
        return Err(ConfigError::invalid(
            key,
            "names starting with `tensorzero::` are reserved",
        ));
    }
    Ok(())
}

fn check_path(key: String, path: &str) -> Result<(), ConfigError> {
    if path.trim().is_empty() {
        return Err(ConfigError::invalid(key, "must name a file"));
    }
    Ok(())
}

impl FunctionConfig {
    pub(crate) fn validate(&self, name: &str, context: &FunctionContext<'_>) -> Result<(), ConfigError> {
        let key = format!("functions.{name}");
        check_name(&key, name, "function")?;
        self.check_schemas(&key)?;
        self.check_tools(&key, context)?;
        if self.variants.is_empty() {
            return Err(ConfigError::invalid(
                format!("{key}.variants"),
                "must define at least one variant",
            ));
        }
        let schema_names: BTreeSet<String> = self.schema_paths().into_iter().map(|(n, _, _)| n).collect();
        for (variant_name, variant) in &self.variants {
            let variant_key = format!("{key}.variants.{variant_name}");
            check_name(&variant_key, variant_name, "variant")?;
            variant.check_kind(&variant_key, self.kind, &self.variants)?;
            let prompt_key = format!("{variant_key}.{}", variant.prompt_key());
            let prompt_key = prompt_key.trim_end_matches('.');
            variant.prompt().validate(prompt_key, context)?;
            if let VariantConfig::DynamicInContextLearning(dicl) = variant {
                // It writes its own prompt: no templates, so the schemas need none.
                dicl.validate(&variant_key, context.models)?;
                continue;
            }
            for schema in &schema_names {
                if !variant.template_paths().iter().any(|(n, _, _)| n == schema) {
                    return Err(ConfigError::invalid(
                        format!("{prompt_key}.templates.{schema}"),
                        format!(
                            "the function has the schema `{schema}`, so every variant needs a template of that name"
                        ),
                    ));
                }
            }
        }
        super::variants::check_variant_graph(&key, &self.variants)?;
        self.check_sampling(&key, context)
    }

    fn check_schemas(&self, key: &str) -> Result<(), ConfigError> {
        let mut seen = BTreeSet::new();
        for (schema, suffix, path) in self.schema_paths() {
            check_path(format!("{key}.{suffix}"), path)?;
            if !seen.insert(schema.clone()) {
                return Err(ConfigError::invalid(
                    format!("{key}.schemas.{schema}"),
                    format!("the schema `{schema}` is also given by `{schema}_schema`: keep one"),
                ));
            }
        }
        match (self.kind, &self.output_schema) {
            (FunctionKind::Json, Some(path)) => check_path(format!("{key}.output_schema"), path),
            (FunctionKind::Chat, Some(_)) => Err(ConfigError::invalid(
                format!("{key}.output_schema"),
                "only json functions have an output schema",
            )),
            _ => Ok(()),
        }
    }

    fn check_tools(&self, key: &str, context: &FunctionContext<'_>) -> Result<(), ConfigError> {
        if self.kind == FunctionKind::Json {
            let chat_only = [
                ("tools", !self.tools.is_empty()),
                ("tool_choice", self.tool_choice.is_some()),
                ("parallel_tool_calls", self.parallel_tool_calls.is_some()),
            ];
            if let Some((field, _)) = chat_only.iter().find(|(_, set)| *set) {
                return Err(ConfigError::invalid(
                    format!("{key}.{field}"),
                    "only chat functions take tools (json functions answer through output_schema)",
                ));
            }
        }
        for (index, tool) in self.tools.iter().enumerate() {
            if !context.tools.contains_key(tool) {
                return Err(ConfigError::invalid(
                    format!("{key}.tools[{index}]"),
                    format!("tool `{tool}` is not defined in [tools]"),
                ));
            }
            if self.tools[..index].contains(tool) {
                return Err(ConfigError::invalid(
                    format!("{key}.tools[{index}]"),
                    format!("tool `{tool}` is listed twice"),
                ));
            }
        }
        match &self.tool_choice {
            Some(ToolChoice::Specific(tool)) if !self.tools.contains(tool) => Err(ConfigError::invalid(
                format!("{key}.tool_choice.specific"),
                format!("tool `{tool}` is not among this function's tools"),
            )),
            Some(ToolChoice::Required) if self.tools.is_empty() => Err(ConfigError::invalid(
                format!("{key}.tool_choice"),
                "`required` needs at least one tool in `tools`",
            )),
            _ => Ok(()),
        }
    }

    fn check_sampling(&self, key: &str, context: &FunctionContext<'_>) -> Result<(), ConfigError> {
        for (variant_name, variant) in &self.variants {
            let Some(weight) = variant.weight() else {
                continue;
            };
            let weight_key = format!("{key}.variants.{variant_name}.weight");
            if self.experimentation.is_some() {
                return Err(ConfigError::invalid(
                    weight_key,
                    "`weight` cannot be mixed with [experimentation]: list the variants there",
                ));
            }
            if !weight.is_finite() || weight < 0.0 {
                return Err(ConfigError::invalid(weight_key, "must be a finite number >= 0"));
            }
        }
        match &self.experimentation {
            Some(experimentation) => {
                let variants = self.variants.keys().map(String::as_str).collect();
                experimentation.validate(&format!("{key}.experimentation"), &variants, context.metrics)
            }
            None => Ok(()),
        }
    }
}

impl ChatCompletionConfig {
    fn validate(&self, key: &str, context: &FunctionContext<'_>) -> Result<(), ConfigError> {
        if let Err(err) = resolve_model(context.models, &self.model) {
            let message = match err {
                ModelLookupError::UnknownModel(_) => format!(
                    "model `{}` is not defined in [models] and is not a `provider::model` shorthand",
                    self.model
                ),
                other => other.to_string(),
            };
            return Err(ConfigError::invalid(format!("{key}.model"), message));
        }
        let mut seen = BTreeSet::new();
        for (template, suffix, path) in self.template_paths() {
            check_path(format!("{key}.{suffix}"), path)?;
            if !seen.insert(template.clone()) {
                return Err(ConfigError::invalid(
                    format!("{key}.templates.{template}"),
                    format!("the template `{template}` is also given by `{template}_template`: keep one"),
                ));
            }
        }
        self.check_params(key)?;
        self.check_extras(key)
    }

    fn check_params(&self, key: &str) -> Result<(), ConfigError> {
        let ranges = [
            ("temperature", self.temperature, 0.0, 2.0),
            ("top_p", self.top_p, 0.0, 1.0),
            ("presence_penalty", self.presence_penalty, -2.0, 2.0),
            ("frequency_penalty", self.frequency_penalty, -2.0, 2.0),
        ];
        for (field, value, low, high) in ranges {
            if let Some(value) = value {
                if !(low..=high).contains(&value) {
                    return Err(ConfigError::invalid(
                        format!("{key}.{field}"),
                        format!("must be between {low} and {high}"),
                    ));
                }
            }
        }
        if self.max_tokens == Some(0) {
            return Err(ConfigError::invalid(format!("{key}.max_tokens"), "must be at least 1"));
        }
        if let Some(stops) = &self.stop_sequences {
            if stops.iter().any(String::is_empty) {
                return Err(ConfigError::invalid(
                    format!("{key}.stop_sequences"),
                    "stop sequences must not be empty",
                ));
            }
        }
        if !self.retries.max_delay_s.is_finite() || self.retries.max_delay_s < 0.0 {
            return Err(ConfigError::invalid(
                format!("{key}.retries.max_delay_s"),
                "must be a finite number >= 0",
            ));
        }
        if let Some(timeouts) = &self.timeouts {
            let all = [
                (
                    "non_streaming.total_ms",
                    timeouts.non_streaming.as_ref().and_then(|t| t.total_ms),
                ),
                ("streaming.ttft_ms", timeouts.streaming.as_ref().and_then(|t| t.ttft_ms)),
                (
                    "streaming.total_ms",
                    timeouts.streaming.as_ref().and_then(|t| t.total_ms),
                ),
            ];
            if let Some((field, _)) = all.iter().find(|(_, value)| *value == Some(0)) {
                return Err(ConfigError::invalid(
                    format!("{key}.timeouts.{field}"),
                    "must be positive",
                ));
            }
        }
        Ok(())
    }

    fn check_extras(&self, key: &str) -> Result<(), ConfigError> {
        check_extra_body(key, &self.extra_body)?;
        check_extra_headers(key, &self.extra_headers)
    }
}
