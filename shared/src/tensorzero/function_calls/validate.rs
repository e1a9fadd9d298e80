//! From the request body to an [`InferenceCall`]: every check that does not depend on the
//! variant, done once before any model is called.

use super::episode::parse_episode_id;
use super::error::FunctionError;
use super::input::FunctionInput;
use super::request::{AdditionalTool, ChatCompletionParams, InferenceEdit, InferenceRequest};
use crate::config::CacheMode;
use crate::model::{ExtraEdit, ToolChoice};
use crate::tensorzero::CompiledSchema;
use crate::user_text::excerpt;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use uuid::Uuid;

/// What the inference runs: a configured function, or a model through the built-in passthrough
/// chat function `tensorzero::default`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InferenceTarget {
    Function(String),
    Model(String),
}

/// Where an `extra_body` / `extra_headers` entry applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditScope {
    Always,
    Variant(String),
    /// Calls to this model; with a provider, only to that provider of it.
    Model {
        model: String,
        provider: Option<String>,
    },
}

/// One inference-time edit of the provider request.
#[derive(Debug, Clone, PartialEq)]
pub struct ScopedEdit {
    pub scope: EditScope,
    /// The JSON pointer (body) or header name (headers).
    pub target: String,
    pub edit: ExtraEdit,
}

/// A tool given with the request, its schema compiled.
#[derive(Debug, Clone)]
pub struct DynamicTool {
    pub name: String,
    pub description: Option<String>,
    pub parameters: Arc<CompiledSchema>,
    pub strict: bool,
}

/// What the response carries besides the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Includes {
    pub original_response: bool,
    pub raw_response: bool,
    pub raw_usage: bool,
}

/// A checked inference request.
#[derive(Debug, Clone)]
pub struct InferenceCall {
    pub target: InferenceTarget,
    pub input: FunctionInput,
    pub episode_id: Uuid,
    pub variant_name: Option<String>,
    pub params: ChatCompletionParams,
    pub tags: BTreeMap<String, String>,
    pub dryrun: bool,
    pub stream: bool,
    pub internal: bool,
    pub additional_tools: Vec<DynamicTool>,
    pub allowed_tools: Option<Vec<String>>,
    pub tool_choice: Option<ToolChoice>,
    pub parallel_tool_calls: Option<bool>,
    pub output_schema: Option<Arc<CompiledSchema>>,
    pub credentials: HashMap<String, String>,
    /// The cache mode asked for (`None`: the configured default), before dryrun rules.
    pub cache_mode: Option<CacheMode>,
    pub cache_max_age_s: Option<u64>,
    pub extra_body: Vec<ScopedEdit>,
    pub extra_headers: Vec<ScopedEdit>,
    pub includes: Includes,
}

impl InferenceCall {
    /// The cache mode in effect: the request's, else `default`; a dryrun never writes.
    pub(crate) fn effective_cache_mode(&self, default: CacheMode) -> CacheMode {
        let mode = self.cache_mode.unwrap_or(default);
        if self.dryrun {
            mode.without_writes()
        } else {
            mode
        }
    }
}

impl InferenceRequest {
    /// Check everything that does not depend on the function's configuration. `new_episode`
    /// mints an id when the request has none; `now_ms` bounds a given one.
    pub(crate) fn into_call(
        self,
        now_ms: i64,
        new_episode: impl FnOnce() -> Uuid,
    ) -> Result<InferenceCall, FunctionError> {
        let target = match (self.function_name, self.model_name) {
            (Some(function), None) => InferenceTarget::Function(function),
            (None, Some(model)) => InferenceTarget::Model(model),
            (Some(_), Some(_)) => {
                return Err(FunctionError::invalid(
                    "Only one of `function_name` or `model_name` can be provided",
                ))
            }
            (None, None) => {
                return Err(FunctionError::invalid(
                    "Either `function_name` or `model_name` must be provided",
                ))
            }
        };
        if let (InferenceTarget::Model(_), Some(_)) = (&target, &self.variant_name) {
            return Err(FunctionError::invalid(
                "`variant_name` cannot be used with `model_name` (it pins a variant of a function)",
            ));
        }
        let episode_id = match self.episode_id {
            Some(text) => parse_episode_id(&text, now_ms).map_err(|e| FunctionError::invalid(e.to_string()))?,
            None => new_episode(),
        };
        refuse_unsupported("namespace", self.namespace.is_some(), "namespaced experimentation")?;
        refuse_unsupported(
            "provider_tools",
            self.provider_tools.as_ref().is_some_and(|tools| !tools.is_empty()),
            "provider-native tools",
        )?;
        refuse_unsupported(
            "include_aggregated_response",
            self.include_aggregated_response == Some(true),
            "aggregated stream responses",
        )?;
        refuse_unsupported(
            "internal_dynamic_variant_config",
            self.internal_dynamic_variant_config
                .as_ref()
                .is_some_and(|v| !v.is_null()),
            "dynamic variant configurations",
        )?;
        let params = self.params.map(|p| p.chat_completion).unwrap_or_default();
        let stream = self.stream.unwrap_or(false);
        // `include_original_response` puts each provider chunk on its chunk (`original_chunk`).
        for (field, asked) in [
            ("include_raw_response", self.include_raw_response),
            ("include_raw_usage", self.include_raw_usage),
        ] {
            refuse_unsupported(
                field,
                stream && asked == Some(true),
                "raw provider data in streamed answers; it comes with non-streamed ones",
            )?;
        }
        let dryrun = self.dryrun.unwrap_or(false);
        let tags = self.tags.unwrap_or_default();
        let internal = self.internal.unwrap_or(false);
        if let Some(message) = crate::tensorzero::tags::reserved_tag_error(&tags, internal) {
            return Err(FunctionError::invalid(message));
        }
        let additional_tools = self
            .additional_tools
            .unwrap_or_default()
            .into_iter()
            .map(compile_tool)
            .collect::<Result<Vec<_>, _>>()?;
        let output_schema = match self.output_schema {
            None | Some(Value::Null) => None,
            Some(schema) => Some(Arc::new(CompiledSchema::compile(schema).map_err(|e| {
                FunctionError::invalid(format!("`output_schema` is not a valid JSON Schema: {e}"))
            })?)),
        };
        let cache = self.cache_options.unwrap_or_default();
        let extra_body = scoped_edits(self.extra_body, EditKind::Body)?;
        let extra_headers = scoped_edits(self.extra_headers, EditKind::Header)?;
        Ok(InferenceCall {
            target,
            input: self.input,
            episode_id,
            variant_name: self.variant_name,
            params,
            tags,
            dryrun,
            stream,
            internal,
            additional_tools,
            allowed_tools: self.allowed_tools,
            tool_choice: self.tool_choice,
            parallel_tool_calls: self.parallel_tool_calls,
            output_schema,
            credentials: self.credentials.unwrap_or_default(),
            cache_mode: cache.enabled,
            cache_max_age_s: cache.max_age_s,
            extra_body,
            extra_headers,
            includes: Includes {
                original_response: self.include_original_response.unwrap_or(false),
                raw_response: self.include_raw_response.unwrap_or(false),
                raw_usage: self.include_raw_usage.unwrap_or(false),
            },
        })
    }
}

fn refuse_unsupported(field: &str, set: bool, what: &str) -> Result<(), FunctionError> {
    if set {
        return Err(FunctionError::invalid(format!(
            "`{field}` is not supported by Nimbus ({what}); leave it unset"
        )));
    }
    Ok(())
}

fn compile_tool(tool: AdditionalTool) -> Result<DynamicTool, FunctionError> {
    if tool.kind.as_deref().is_some_and(|kind| kind != "function") {
        return Err(FunctionError::invalid(format!(
            "additional tool `{}`: `type` must be \"function\"",
            excerpt(&tool.name)
        )));
    }
    if tool.name.is_empty() || tool.name.len() > 64 {
        return Err(FunctionError::invalid(
            "additional tool names must be 1 to 64 characters long",
        ));
    }
    let parameters = CompiledSchema::compile(tool.parameters).map_err(|e| {
        FunctionError::invalid(format!(
            "additional tool `{}`: `parameters` is not a valid JSON Schema: {e}",
            excerpt(&tool.name)
        ))
    })?;
    Ok(DynamicTool {
        name: tool.name,
        description: tool.description,
        parameters: Arc::new(parameters),
        strict: tool.strict.unwrap_or(false),
    })
}

/// What an [`InferenceEdit`] list edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EditKind {
    Body,
    Header,
}

fn scoped_edits(entries: Option<Vec<InferenceEdit>>, kind: EditKind) -> Result<Vec<ScopedEdit>, FunctionError> {
    let list = match kind {
        EditKind::Body => "extra_body",
        EditKind::Header => "extra_headers",
    };
    let mut edits = Vec::new();
    for (index, entry) in entries.unwrap_or_default().into_iter().enumerate() {
        let field = format!("{list}[{index}]");
        let scope = edit_scope(
            &field,
            entry.variant_name,
            entry.model_name,
            entry.provider_name,
            entry.model_provider_name,
        )?;
        let edit = edit_of(&field, entry.value, entry.delete)?;
        let target = match (kind, entry.pointer, entry.name) {
            (EditKind::Body, Some(pointer), None) => {
                check_pointer(&field, &pointer)?;
                pointer
            }
            (EditKind::Header, None, Some(name)) => {
                if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    return Err(FunctionError::invalid(format!(
                        "`{field}.name` is not a valid header name: `{}`",
                        excerpt(&name)
                    )));
                }
                if matches!(edit, ExtraEdit::Set(ref value) if !value.is_string()) {
                    return Err(FunctionError::invalid(format!("`{field}.value` must be a string")));
                }
                name
            }
            (EditKind::Body, _, _) => {
                return Err(FunctionError::invalid(format!(
                    "`{field}` needs `pointer` (and no `name`)"
                )))
            }
            (EditKind::Header, _, _) => {
                return Err(FunctionError::invalid(format!(
                    "`{field}` needs `name` (and no `pointer`)"
                )))
            }
        };
        edits.push(ScopedEdit { scope, target, edit });
    }
    Ok(edits)
}

fn edit_scope(
    field: &str,
    variant: Option<String>,
    model: Option<String>,
    provider: Option<String>,
    model_provider: Option<String>,
) -> Result<EditScope, FunctionError> {
    if model_provider.is_some() {
        return Err(FunctionError::invalid(format!(
            "`{field}.model_provider_name` is a legacy form; use `model_name` and `provider_name`"
        )));
    }
    match (variant, model, provider) {
        (None, None, None) => Ok(EditScope::Always),
        (Some(variant), None, None) => Ok(EditScope::Variant(variant)),
        (None, Some(model), provider) => Ok(EditScope::Model { model, provider }),
        (None, None, Some(_)) => Err(FunctionError::invalid(format!(
            "`{field}.provider_name` needs `model_name`"
        ))),
        (Some(_), Some(_), _) | (Some(_), None, Some(_)) => Err(FunctionError::invalid(format!(
            "`{field}` may name a variant or a model, not both"
        ))),
    }
}

fn check_pointer(field: &str, pointer: &str) -> Result<(), FunctionError> {
    if pointer.is_empty() || pointer.starts_with('/') {
        Ok(())
    } else {
        Err(FunctionError::invalid(format!(
            "`{field}.pointer` must be a JSON Pointer (empty or starting with `/`): `{}`",
            excerpt(pointer)
        )))
    }
}

fn edit_of(field: &str, value: Option<Value>, delete: Option<bool>) -> Result<ExtraEdit, FunctionError> {
    match (value, delete) {
        (Some(value), None | Some(false)) => Ok(ExtraEdit::Set(value)),
        (None, Some(true)) => Ok(ExtraEdit::Delete),
        (Some(_), Some(true)) => Err(FunctionError::invalid(format!(
            "`{field}` has both `value` and `delete`"
        ))),
        (None, _) => Err(FunctionError::invalid(format!(
            "`{field}` needs `value` or `delete: true`"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(body: Value) -> Result<InferenceCall, FunctionError> {
        let request: InferenceRequest =
            serde_json::from_value(body).map_err(|e| FunctionError::invalid(e.to_string()))?;
        request.into_call(1_790_000_000_000, Uuid::now_v7)
    }

    /// What the tensorzero client sends for a plain call: every key, most null.
    fn client_body() -> Value {
        json!({
            "function_name": "f", "model_name": null, "episode_id": null, "namespace": null,
            "input": {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
            "stream": null, "params": {"chat_completion": {}}, "variant_name": null, "dryrun": null,
            "internal": false, "tags": {}, "provider_tools": [], "output_schema": null, "credentials": {},
            "cache_options": {"max_age_s": null, "enabled": "off"}, "include_original_response": false,
            "include_raw_response": false, "include_raw_usage": false, "include_aggregated_response": false,
            "extra_body": [], "extra_headers": [], "internal_dynamic_variant_config": null
        })
    }

    #[test]
    fn the_clients_full_body_is_accepted() {
        let call = call(client_body()).unwrap();
        assert_eq!(call.target, InferenceTarget::Function("f".into()));
        assert_eq!(call.cache_mode, Some(CacheMode::Off));
        assert_eq!(call.episode_id.get_version_num(), 7);
    }

    #[test]
    fn targets_edits_and_unsupported_fields_are_checked() {
        let mut both = client_body();
        both["model_name"] = json!("dummy");
        assert!(call(both).is_err());
        let mut unknown = client_body();
        unknown["temprature"] = json!(1);
        assert!(call(unknown).is_err());
        let mut namespace = client_body();
        namespace["namespace"] = json!("x");
        assert!(call(namespace).unwrap_err().to_string().contains("namespace"));
        let mut bad_pointer = client_body();
        bad_pointer["extra_body"] = json!([{"pointer": "temperature", "value": 1}]);
        assert!(call(bad_pointer)
            .unwrap_err()
            .to_string()
            .contains("extra_body[0].pointer"));
        let mut scoped = client_body();
        scoped["extra_body"] = json!([
            {"variant_name": "v", "pointer": "/a", "value": 1},
            {"model_name": "m", "provider_name": "p", "pointer": "/b", "delete": true}
        ]);
        let scoped = call(scoped).unwrap();
        assert_eq!(scoped.extra_body[0].scope, EditScope::Variant("v".into()));
        assert_eq!(scoped.extra_body[1].edit, ExtraEdit::Delete);
    }

    #[test]
    fn raw_provider_data_is_refused_for_streams_only() {
        let mut original = client_body();
        original["include_original_response"] = json!(true);
        original["stream"] = json!(true);
        assert!(call(original).unwrap().includes.original_response);
        for field in ["include_raw_response", "include_raw_usage"] {
            let mut body = client_body();
            body[field] = json!(true);
            assert!(call(body.clone()).is_ok(), "{field}");
            body["stream"] = json!(true);
            let message = call(body).unwrap_err().to_string();
            assert!(message.contains(field), "{message}");
        }
    }

    #[test]
    fn reserved_tags_are_refused_unless_internal() {
        let mut body = client_body();
        body["tags"] = json!({"tensorzero::evaluation": "x"});
        let message = call(body.clone()).unwrap_err().to_string();
        assert!(message.contains("tensorzero::evaluation"), "{message}");
        body["internal"] = json!(true);
        assert!(call(body).is_ok());
    }

    #[test]
    fn dryrun_never_writes_the_cache() {
        let mut body = client_body();
        body["dryrun"] = json!(true);
        body["cache_options"] = json!({"enabled": "on"});
        assert_eq!(
            call(body).unwrap().effective_cache_mode(CacheMode::WriteOnly),
            CacheMode::ReadOnly
        );
    }
}
