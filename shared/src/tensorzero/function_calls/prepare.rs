//! One variant's model request: templates rendered, tools resolved, json mode and parameters
//! applied, edits scoped. Nothing here calls a model.

use super::error::FunctionError;
use super::input::{FileInput, InputBlock, InputMessage, InputRole};
use super::validate::{EditScope, InferenceCall, ScopedEdit};
use crate::config::functions::{ChatCompletionConfig, FunctionKind, JsonMode};
use crate::model::{
    ContentBlock, ExtraBodyEntry, ExtraEdit, ExtraHeaderEntry, ExtraPlacement, FileData, Message, ModelRequest,
    OutputMode, RetryScope, Role, SamplingParams, StreamOptions, ToolChoice, ToolDefinition,
};
use crate::tensorzero::{CompiledSchema, Function, FunctionSet, TemplateInput};
use crate::user_text::excerpt;
use serde_json::{json, Value};
use std::sync::Arc;

/// The name of the built-in passthrough function that `model_name` requests run.
pub(crate) const DEFAULT_FUNCTION: &str = "tensorzero::default";

/// The tool a json function in `json_mode = "tool"` answers through.
pub(crate) const JSON_TOOL_NAME: &str = "respond";

/// The variant being prepared and the function it belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct VariantPlan<'a> {
    pub function_name: &'a str,
    pub variant_name: &'a str,
    pub kind: FunctionKind,
    pub model: &'a str,
    /// `None` for `model_name` requests (no templates, no configured parameters).
    pub config: Option<&'a ChatCompletionConfig>,
    /// The configured function; `None` for `model_name` requests.
    pub function: Option<&'a Function>,
}

/// A tool the model was offered.
#[derive(Debug, Clone)]
pub struct OfferedTool {
    /// The name the model sees.
    pub provider_name: String,
    /// The name the answer reports (the `[tools.T]` key, or the additional tool's name).
    pub name: String,
    pub parameters: Arc<CompiledSchema>,
}

/// What the answer is checked against.
#[derive(Debug, Clone, Default)]
pub struct AnswerRules {
    pub tools: Vec<OfferedTool>,
    /// json functions: the schema `parsed` must match.
    pub output_schema: Option<Arc<CompiledSchema>>,
    /// json functions in tool mode: the answer is this tool's arguments.
    pub json_tool: bool,
}

/// A model request ready to send, and the rules for its answer.
#[derive(Debug, Clone)]
pub struct PreparedCall {
    pub request: ModelRequest,
    pub rules: AnswerRules,
}

pub(crate) fn prepare(
    functions: &FunctionSet,
    plan: VariantPlan<'_>,
    call: &InferenceCall,
) -> Result<PreparedCall, FunctionError> {
    let templates = Templates { functions, plan };
    let system = templates.system(call.input.system.as_ref())?;
    let mut messages = Vec::with_capacity(call.input.messages.len());
    for (index, message) in call.input.messages.iter().enumerate() {
        messages.push(templates.message(index, message)?);
    }
    assemble(functions, plan, call, system, messages)
}

/// A prompt the variant wrote itself (DICL): `system` as given, `messages` without the role
/// templates (their text comes as `raw_text`); the rest (tools, output schema, json mode,
/// parameters, edits) as [`prepare`] does.
pub(crate) fn prepare_written(
    functions: &FunctionSet,
    plan: VariantPlan<'_>,
    call: &InferenceCall,
    system: String,
    written: &[InputMessage],
) -> Result<PreparedCall, FunctionError> {
    let templates = Templates { functions, plan };
    let mut messages = Vec::with_capacity(written.len());
    for (index, message) in written.iter().enumerate() {
        messages.push(templates.message(index, message)?);
    }
    assemble(functions, plan, call, Some(system), messages)
}

fn assemble(
    functions: &FunctionSet,
    plan: VariantPlan<'_>,
    call: &InferenceCall,
    system: Option<String>,
    messages: Vec<Message>,
) -> Result<PreparedCall, FunctionError> {
    let json_mode = effective_json_mode(plan, call);
    let output_schema = match plan.kind {
        FunctionKind::Json => call
            .output_schema
            .clone()
            .or_else(|| plan.function.and_then(|f| f.output_schema().cloned())),
        FunctionKind::Chat => None,
    };
    let mut rules = AnswerRules {
        output_schema: output_schema.clone(),
        ..AnswerRules::default()
    };
    let chat_tools = match (plan.kind, json_mode) {
        (FunctionKind::Json, Some(JsonMode::Tool)) => {
            let schema = output_schema
                .clone()
                .map(|s| s.value().clone())
                .unwrap_or_else(|| json!({}));
            rules.json_tool = true;
            let tool = ToolDefinition {
                name: JSON_TOOL_NAME.to_owned(),
                description: Some("Respond to the user with this tool, in JSON matching its parameters.".to_owned()),
                parameters: Some(schema),
                strict: Some(false),
            };
            ChatTools {
                tools: vec![tool],
                tool_choice: Some(ToolChoice::Specific(JSON_TOOL_NAME.to_owned())),
                parallel: None,
                allowed: None,
            }
        }
        (FunctionKind::Json, _) => ChatTools {
            tools: Vec::new(),
            tool_choice: None,
            parallel: None,
            allowed: None,
        },
        (FunctionKind::Chat, _) => chat_tools(functions, plan, call, &mut rules)?,
    };
    // A chat call's `output_schema` (e.g. an OpenAI client's `json_schema` response format)
    // shapes the request only: chat answers stay text.
    let request_schema = output_schema.clone().or_else(|| call.output_schema.clone());
    let output = output_mode(json_mode, request_schema.as_deref());
    let system = with_json_instruction(system, &messages, json_mode);
    let request = ModelRequest {
        model: plan.model.to_owned(),
        system,
        messages,
        tools: chat_tools.tools,
        tool_choice: chat_tools.tool_choice,
        parallel_tool_calls: chat_tools.parallel,
        allowed_tools: chat_tools.allowed,
        output,
        params: sampling_params(plan.config, call),
        stream: call.stream.then_some(StreamOptions {
            include_usage: true,
            raw_chunks: call.includes.original_response,
        }),
        extra_body: body_edits(plan, &call.extra_body),
        extra_headers: header_edits(plan, &call.extra_headers),
        openai_pass_through: pass_through(),
        retries: RetryScope::Inference,
        ..ModelRequest::default()
    };
    Ok(PreparedCall { request, rules })
}

struct Templates<'a> {
    functions: &'a FunctionSet,
    plan: VariantPlan<'a>,
}

impl Templates<'_> {
    fn has(&self, name: &str) -> bool {
        self.plan.config.is_some()
            && self
                .functions
                .has_template(self.plan.function_name, self.plan.variant_name, name)
    }

    fn schema(&self, name: &str) -> Option<&CompiledSchema> {
        self.plan.function.and_then(|f| f.schema(name))
    }

    fn render(&self, name: &str, input: TemplateInput<'_>, field: &str) -> Result<String, FunctionError> {
        self.functions
            .render(self.plan.function_name, self.plan.variant_name, name, input)
            .map_err(|e| FunctionError::invalid(format!("`{field}`: {e}")))
    }

    /// Arguments for template `name`: checked against the function's schema of that name.
    fn arguments(&self, name: &str, arguments: &Value, field: &str) -> Result<String, FunctionError> {
        if let Some(schema) = self.schema(name) {
            schema
                .validate(arguments)
                .map_err(|e| FunctionError::invalid(format!("`{field}` failed validation: {e}")))?;
        }
        if !arguments.is_object() {
            return Err(FunctionError::invalid(format!("`{field}` must be an object")));
        }
        if !self.has(name) {
            return Err(FunctionError::invalid(format!(
                "`{field}`: variant `{}` of function `{}` has no template `{}`",
                excerpt(self.plan.variant_name),
                excerpt(self.plan.function_name),
                excerpt(name)
            )));
        }
        self.render(name, TemplateInput::Arguments(arguments), field)
    }

    /// Text for a role: through the role's template when it has one (`{{<role>_text}}`).
    fn text(&self, role: &str, text: &str, field: &str) -> Result<String, FunctionError> {
        if self.schema(role).is_some() {
            return Err(FunctionError::invalid(format!(
                "`{field}`: function `{}` has a {role} schema; send arguments (an object), not text",
                excerpt(self.plan.function_name)
            )));
        }
        if self.has(role) {
            return self.render(role, TemplateInput::Text(text), field);
        }
        Ok(text.to_owned())
    }

    fn system(&self, system: Option<&Value>) -> Result<Option<String>, FunctionError> {
        match system {
            None | Some(Value::Null) => {
                if self.schema("system").is_some() {
                    return Err(FunctionError::invalid(format!(
                        "`input.system` is required: function `{}` has a system schema",
                        excerpt(self.plan.function_name)
                    )));
                }
                if self.has("system") {
                    return self
                        .render("system", TemplateInput::Arguments(&json!({})), "input.system")
                        .map(Some);
                }
                Ok(None)
            }
            Some(Value::String(text)) => self.text("system", text, "input.system").map(Some),
            Some(arguments @ Value::Object(_)) => self.arguments("system", arguments, "input.system").map(Some),
            Some(_) => Err(FunctionError::invalid("`input.system` must be a string or an object")),
        }
    }

    fn message(&self, index: usize, message: &InputMessage) -> Result<Message, FunctionError> {
        let role = message.role.as_str();
        let mut content = Vec::with_capacity(message.content.len());
        for (block_index, block) in message.content.iter().enumerate() {
            let field = format!("input.messages[{index}].content[{block_index}]");
            if let Some(block) = self.block(role, block, &field)? {
                content.push(block);
            }
        }
        let role = match message.role {
            InputRole::User => Role::User,
            InputRole::Assistant => Role::Assistant,
        };
        Ok(Message::new(role, content))
    }

    fn block(&self, role: &str, block: &InputBlock, field: &str) -> Result<Option<ContentBlock>, FunctionError> {
        let block = match block {
            InputBlock::Text(text) => match (&text.text, &text.arguments) {
                (Some(text), None) => ContentBlock::text_block(self.text(role, text, field)?),
                (None, Some(arguments)) => ContentBlock::text_block(self.arguments(role, arguments, field)?),
                _ => {
                    return Err(FunctionError::invalid(format!(
                        "`{field}`: a text block has exactly one of `text` or `arguments`"
                    )))
                }
            },
            InputBlock::Template(template) => {
                ContentBlock::text_block(self.arguments(&template.name, &template.arguments, field)?)
            }
            InputBlock::RawText(raw) => ContentBlock::text_block(raw.value.clone()),
            InputBlock::ToolCall(call) => {
                let Some(name) = call.called_name() else {
                    return Err(FunctionError::invalid(format!("`{field}`: a tool call needs `name`")));
                };
                ContentBlock::ToolCall {
                    id: call.id.clone(),
                    name: name.to_owned(),
                    arguments: call.arguments_text(),
                }
            }
            InputBlock::ToolResult(result) => ContentBlock::ToolResult {
                id: result.id.clone(),
                name: result.name.clone(),
                result: result.result.clone(),
            },
            InputBlock::File(file) => file_block(file, field)?,
            InputBlock::Thought(thought) => ContentBlock::Thought {
                text: thought.text.clone().unwrap_or_default(),
                signature: thought.signature.clone(),
            },
            InputBlock::Unknown(unknown) => {
                let other_model = unknown.model_name.as_deref().is_some_and(|m| m != self.plan.model);
                if other_model {
                    return Ok(None);
                }
                ContentBlock::Unknown {
                    data: unknown.data.clone(),
                }
            }
        };
        Ok(Some(block))
    }
}

fn file_block(file: &FileInput, field: &str) -> Result<ContentBlock, FunctionError> {
    let kind = file
        .file_type
        .as_deref()
        .unwrap_or(if file.url.is_some() { "url" } else { "base64" });
    let data = match (kind, &file.url, &file.data) {
        ("url", Some(url), _) => FileData::Url { url: url.clone() },
        ("base64", _, Some(data)) => {
            if file.mime_type.is_none() {
                return Err(FunctionError::invalid(format!(
                    "`{field}`: a base64 file needs `mime_type`"
                )));
            }
            if !is_base64(data) {
                return Err(FunctionError::invalid(format!(
                    "`{field}.data` is not valid base64 (standard alphabet, as TensorZero reads it)"
                )));
            }
            FileData::Base64 { data: data.clone() }
        }
        ("url", None, _) => return Err(FunctionError::invalid(format!("`{field}`: a url file needs `url`"))),
        ("base64", _, None) => return Err(FunctionError::invalid(format!("`{field}`: a base64 file needs `data`"))),
        (other, _, _) => {
            return Err(FunctionError::invalid(format!(
                "`{field}.file_type` `{}` is not supported (use `url` or `base64`)",
                excerpt(other)
            )))
        }
    };
    Ok(ContentBlock::File {
        data,
        mime_type: file.mime_type.clone(),
        filename: file.filename.clone(),
        detail: file.detail.clone(),
    })
}

/// Whether `data` is standard base64 (padding optional, ASCII whitespace ignored).
fn is_base64(data: &str) -> bool {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    use base64::Engine;
    const ENGINE: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let compact: Vec<u8> = data.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    !compact.is_empty() && ENGINE.decode(compact).is_ok()
}

/// json functions: the request's `json_mode`, else the variant's (`strict` by default).
fn effective_json_mode(plan: VariantPlan<'_>, call: &InferenceCall) -> Option<JsonMode> {
    let configured = plan.config.and_then(|c| c.json_mode);
    match plan.kind {
        FunctionKind::Json => Some(call.params.json_mode.or(configured).unwrap_or(JsonMode::Strict)),
        FunctionKind::Chat => call.params.json_mode,
    }
}

fn output_mode(json_mode: Option<JsonMode>, schema: Option<&CompiledSchema>) -> OutputMode {
    match (json_mode, schema) {
        (None | Some(JsonMode::Off) | Some(JsonMode::Tool), _) => OutputMode::Text,
        (Some(JsonMode::On), _) => OutputMode::JsonObject,
        (Some(JsonMode::Strict), Some(schema)) => OutputMode::JsonSchema {
            name: "response".to_owned(),
            description: None,
            schema: Some(schema.value().clone()),
            strict: Some(true),
        },
        (Some(JsonMode::Strict), _) => OutputMode::JsonObject,
    }
}

/// What `json_mode = "on"` adds to the system prompt when the prompt never says "JSON" (OpenAI
/// refuses `json_object` requests that do not), as TensorZero does.
pub(crate) const JSON_INSTRUCTION: &str = "Reply in JSON.";

/// With `json_mode = "on"`, the system prompt opens with [`JSON_INSTRUCTION`] unless the system
/// prompt or a message already mentions JSON (in any case).
fn with_json_instruction(system: Option<String>, messages: &[Message], json_mode: Option<JsonMode>) -> Option<String> {
    if json_mode != Some(JsonMode::On) {
        return system;
    }
    let mentions_json = |text: &str| text.to_lowercase().contains("json");
    let in_messages = messages.iter().flat_map(|m| &m.content).any(|block| match block {
        ContentBlock::Text { text } => mentions_json(text),
        ContentBlock::ToolResult { result, .. } => mentions_json(result),
        _ => false,
    });
    match system {
        Some(system) if mentions_json(&system) || in_messages => Some(system),
        None if in_messages => None,
        Some(system) => Some(format!("{JSON_INSTRUCTION}\n\n{system}")),
        None => Some(JSON_INSTRUCTION.to_owned()),
    }
}

/// A chat call's tools: what is offered, the choice, and (with `allowed_tools`) which of them
/// the model may call.
struct ChatTools {
    tools: Vec<ToolDefinition>,
    tool_choice: Option<ToolChoice>,
    parallel: Option<bool>,
    allowed: Option<Vec<String>>,
}

fn chat_tools(
    functions: &FunctionSet,
    plan: VariantPlan<'_>,
    call: &InferenceCall,
    rules: &mut AnswerRules,
) -> Result<ChatTools, FunctionError> {
    // The function's tools, then any other configured tool `allowed_tools` names: all are sent;
    // `allowed_tools` restricts which the model may call (see `ModelRequest::allowed_tools`).
    let mut configured: Vec<String> = plan.function.map(|f| f.config.tools.clone()).unwrap_or_default();
    for name in call.allowed_tools.iter().flatten() {
        if !configured.contains(name) {
            configured.push(name.clone());
        }
    }
    let mut tools = Vec::new();
    for name in &configured {
        let Some(tool) = functions.tool(name) else {
            return Err(FunctionError::invalid(format!(
                "`allowed_tools`: unknown tool `{}` (tools come from [tools.*] in the configuration)",
                excerpt(name)
            )));
        };
        let provider_name = tool.config.provider_name(name).to_owned();
        tools.push(ToolDefinition {
            name: provider_name.clone(),
            description: Some(tool.config.description.clone()),
            parameters: Some(tool.parameters.value().clone()),
            strict: Some(tool.config.strict),
        });
        rules.tools.push(OfferedTool {
            provider_name,
            name: name.clone(),
            parameters: Arc::clone(&tool.parameters),
        });
    }
    for tool in &call.additional_tools {
        if rules.tools.iter().any(|t| t.provider_name == tool.name) {
            return Err(FunctionError::invalid(format!(
                "`additional_tools`: a tool named `{}` is already offered",
                excerpt(&tool.name)
            )));
        }
        tools.push(ToolDefinition {
            name: tool.name.clone(),
            description: tool.description.clone(),
            parameters: Some(tool.parameters.value().clone()),
            strict: Some(tool.strict),
        });
        rules.tools.push(OfferedTool {
            provider_name: tool.name.clone(),
            name: tool.name.clone(),
            parameters: Arc::clone(&tool.parameters),
        });
    }
    let function_config = plan.function.map(|f| &f.config);
    let tool_choice = call
        .tool_choice
        .clone()
        .or_else(|| function_config.and_then(|c| c.tool_choice.clone()));
    let tool_choice = match tool_choice {
        Some(ToolChoice::Specific(name)) => {
            let Some(offered) = rules.tools.iter().find(|t| t.name == name || t.provider_name == name) else {
                return Err(FunctionError::invalid(format!(
                    "`tool_choice` names tool `{}`, which is not offered to the model",
                    excerpt(&name)
                )));
            };
            Some(ToolChoice::Specific(offered.provider_name.clone()))
        }
        other if tools.is_empty() => other.filter(|choice| *choice == ToolChoice::None),
        other => other,
    };
    let parallel = call
        .parallel_tool_calls
        .or_else(|| function_config.and_then(|c| c.parallel_tool_calls))
        .filter(|_| !tools.is_empty());
    let allowed = call.allowed_tools.as_ref().map(|allowed| {
        let by_config = rules.tools.iter().filter(|t| allowed.contains(&t.name));
        let additional = call.additional_tools.iter().map(|t| &t.name);
        by_config.map(|t| &t.provider_name).chain(additional).cloned().collect()
    });
    Ok(ChatTools {
        tools,
        tool_choice,
        parallel,
        allowed,
    })
}

fn sampling_params(config: Option<&ChatCompletionConfig>, call: &InferenceCall) -> SamplingParams {
    let p = &call.params;
    SamplingParams {
        temperature: p.temperature.or(config.and_then(|c| c.temperature)),
        top_p: p.top_p.or(config.and_then(|c| c.top_p)),
        max_tokens: p.max_tokens.or(config.and_then(|c| c.max_tokens.map(u64::from))),
        presence_penalty: p.presence_penalty.or(config.and_then(|c| c.presence_penalty)),
        frequency_penalty: p.frequency_penalty.or(config.and_then(|c| c.frequency_penalty)),
        seed: p.seed.or(config.and_then(|c| c.seed)).map(i64::from),
        stop_sequences: p
            .stop_sequences
            .clone()
            .or_else(|| config.and_then(|c| c.stop_sequences.clone()))
            .unwrap_or_default(),
        reasoning_effort: p
            .reasoning_effort
            .clone()
            .or_else(|| config.and_then(|c| c.reasoning_effort.clone())),
        service_tier: p
            .service_tier
            .or(config.and_then(|c| c.service_tier))
            .map(|tier| tier.as_str().to_owned()),
        thinking_budget_tokens: p
            .thinking_budget_tokens
            .or(config.and_then(|c| c.thinking_budget_tokens)),
        verbosity: p.verbosity.clone().or_else(|| config.and_then(|c| c.verbosity.clone())),
        ..SamplingParams::default()
    }
}

/// What OpenAI-compatible providers get beyond the neutral request: the token cap as
/// `max_completion_tokens`, as TensorZero's `openai` provider sends it (a provider's
/// `max_tokens_field` can say otherwise).
fn pass_through() -> crate::model::OpenAiPassThrough {
    crate::model::OpenAiPassThrough {
        max_completion_tokens_spelling: true,
        ..crate::model::OpenAiPassThrough::default()
    }
}

/// Whether an inference-time edit applies to this variant's call; `Some(provider filter)`.
fn applies(scope: &EditScope, plan: VariantPlan<'_>) -> Option<Option<String>> {
    match scope {
        EditScope::Always => Some(None),
        EditScope::Variant(variant) => (variant == plan.variant_name).then_some(None),
        EditScope::Model { model, provider } => (model == plan.model).then(|| provider.clone()),
    }
}

/// The variant's configured edits (placed before the provider's configuration), then the
/// request's that apply to this variant (after it: they win), each kept to its provider.
fn body_edits(plan: VariantPlan<'_>, request_edits: &[ScopedEdit]) -> Vec<ExtraBodyEntry> {
    let configured = plan.config.into_iter().flat_map(|c| &c.extra_body);
    let mut entries: Vec<ExtraBodyEntry> = configured
        .map(|entry| entry.to_model(ExtraPlacement::BeforeProviderConfig))
        .collect();
    for edit in request_edits {
        let Some(provider) = applies(&edit.scope, plan) else {
            continue;
        };
        let entry = match &edit.edit {
            ExtraEdit::Set(value) => ExtraBodyEntry::set(edit.target.clone(), value.clone()),
            ExtraEdit::Delete => ExtraBodyEntry::delete(edit.target.clone()),
        };
        entries.push(match provider {
            Some(provider) => entry.for_provider(provider),
            None => entry,
        });
    }
    entries
}

fn header_edits(plan: VariantPlan<'_>, request_edits: &[ScopedEdit]) -> Vec<ExtraHeaderEntry> {
    let configured = plan.config.into_iter().flat_map(|c| &c.extra_headers);
    let mut entries: Vec<ExtraHeaderEntry> = configured
        .map(|entry| entry.to_model(ExtraPlacement::BeforeProviderConfig))
        .collect();
    for edit in request_edits {
        let Some(provider) = applies(&edit.scope, plan) else {
            continue;
        };
        let entry = match &edit.edit {
            ExtraEdit::Set(Value::String(value)) => ExtraHeaderEntry::set(edit.target.clone(), value.clone()),
            ExtraEdit::Set(other) => ExtraHeaderEntry::set(edit.target.clone(), other.to_string()),
            ExtraEdit::Delete => ExtraHeaderEntry::delete(edit.target.clone()),
        };
        entries.push(match provider {
            Some(provider) => entry.for_provider(provider),
            None => entry,
        });
    }
    entries
}

#[cfg(test)]
#[path = "prepare_tests.rs"]
mod tests;
