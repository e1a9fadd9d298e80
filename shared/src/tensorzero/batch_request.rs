//! `POST /batch_inference`'s body (TensorZero's shape), and how it becomes one `/inference`
//! request per input: each per-item array gives that input its value, the batch's one variant is
//! pinned on every item, and every item is checked before anything is queued.

use super::function_calls::{
    BatchVariant, FunctionChecks, FunctionError, FunctionService, InferenceCall, InferenceRequest,
};
use crate::openai::json_body::bounded_serde_message;
use crate::ports::{batch_base, BatchItemId, ProjectId};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use uuid::Uuid;

/// At most this many inputs in one batch.
pub(crate) const MAX_BATCH_INPUTS: usize = 50_000;

#[derive(Debug, Clone, PartialEq, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchInferenceRequest {
    #[serde(default)]
    pub function_name: Option<String>,
    #[serde(default)]
    pub inputs: Option<Vec<Value>>,
    #[serde(default)]
    pub episode_ids: Option<Vec<Option<String>>>,
    #[serde(default)]
    pub variant_name: Option<String>,
    #[serde(default)]
    pub tags: Option<Vec<Option<BTreeMap<String, String>>>>,
    #[serde(default)]
    pub output_schemas: Option<Vec<Option<Value>>>,
    #[serde(default)]
    pub params: Option<BatchParams>,
    #[serde(default)]
    pub additional_tools: Option<Vec<Option<Vec<Value>>>>,
    #[serde(default)]
    pub allowed_tools: Option<Vec<Option<Vec<String>>>>,
    #[serde(default)]
    pub tool_choice: Option<Vec<Option<Value>>>,
    #[serde(default)]
    pub parallel_tool_calls: Option<Vec<Option<bool>>>,
    #[serde(default)]
    pub credentials: Option<HashMap<String, String>>,
    /// Not for batches; accepted only to be refused with a clear message.
    #[serde(default)]
    pub model_name: Option<Value>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub dryrun: Option<bool>,
    #[serde(default)]
    pub cache_options: Option<Value>,
}

/// `params`: per-item values of inference-time parameters, by variant type.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchParams {
    #[serde(default)]
    pub chat_completion: BatchChatParams,
}

/// `params.chat_completion`: each a list as long as `inputs`, null where the variant's value holds.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchChatParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<Vec<Option<f64>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<Vec<Option<u64>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<Vec<Option<u32>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<Vec<Option<f64>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<Vec<Option<f64>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<Vec<Option<f64>>>,
}

/// One item, ready to queue: its ids and the line a worker runs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlannedItem {
    pub inference_id: Uuid,
    pub episode_id: Uuid,
    /// `{"inference_id", "request"}`: the item's `/inference` request, as JSON (no newline).
    pub line: String,
}

/// A checked batch: its id, function, variant, credentials and items (whose ids derive from the
/// batch's: [`BatchItemId`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlannedBatch {
    pub batch_id: Uuid,
    pub function_name: String,
    pub variant: BatchVariant,
    pub credentials: HashMap<String, String>,
    pub items: Vec<PlannedItem>,
}

/// A stored item line, as a worker reads it back.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct ItemLine {
    inference_id: Uuid,
    request: InferenceRequest,
}

/// The ids at the head of an item line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
pub(crate) struct ItemIds {
    pub inference_id: Uuid,
    pub episode_id: Uuid,
}

/// The head of a stored item line: only its ids are read.
#[derive(Deserialize)]
struct IdsLine {
    inference_id: Uuid,
    request: IdsRequest,
}

#[derive(Deserialize)]
struct IdsRequest {
    episode_id: Uuid,
}

impl From<IdsLine> for ItemIds {
    fn from(line: IdsLine) -> Self {
        Self {
            inference_id: line.inference_id,
            episode_id: line.request.episode_id,
        }
    }
}

/// The ids of a stored item line read by a batch run (its JSON), when it is one.
pub(crate) fn item_ids(item: &Value) -> Option<ItemIds> {
    IdsLine::deserialize(item).ok().map(ItemIds::from)
}

/// The ids of a stored item line straight from its bytes, nothing else of it read (a poll reads
/// the ids of every item of a batch).
pub(crate) fn item_ids_in(line: &[u8]) -> Option<ItemIds> {
    serde_json::from_slice::<IdsLine>(line).ok().map(ItemIds::from)
}

/// A per-item list, checked against the number of inputs.
fn per_item<T: Clone>(
    field: &str,
    list: Option<Vec<Option<T>>>,
    inputs: usize,
) -> Result<Vec<Option<T>>, FunctionError> {
    match list {
        None => Ok(vec![None; inputs]),
        Some(list) if list.len() == inputs => Ok(list),
        Some(list) => Err(FunctionError::invalid(format!(
            "`{field}` has {} entries but `inputs` has {inputs}: every per-item list must be as long as `inputs`",
            list.len()
        ))),
    }
}

fn refuse(field: &str, set: bool, why: &str) -> Result<(), FunctionError> {
    if set {
        return Err(FunctionError::invalid(format!(
            "`{field}` is not supported by /batch_inference ({why})"
        )));
    }
    Ok(())
}

/// The per-item values of every list, in input order.
struct Columns {
    episode_ids: Vec<Option<String>>,
    tags: Vec<Option<BTreeMap<String, String>>>,
    output_schemas: Vec<Option<Value>>,
    additional_tools: Vec<Option<Vec<Value>>>,
    allowed_tools: Vec<Option<Vec<String>>>,
    tool_choice: Vec<Option<Value>>,
    parallel_tool_calls: Vec<Option<bool>>,
    params: Vec<(&'static str, Vec<Option<Value>>)>,
}

impl Columns {
    fn new(request: &mut BatchInferenceRequest, inputs: usize) -> Result<Self, FunctionError> {
        let chat = request.params.take().map(|p| p.chat_completion).unwrap_or_default();
        let mut params = Vec::new();
        let numbers = |field: &'static str, list: Option<Vec<Option<f64>>>| -> Result<_, FunctionError> {
            let values = per_item(&format!("params.chat_completion.{field}"), list, inputs)?;
            Ok((field, values.into_iter().map(|v| v.map(Value::from)).collect()))
        };
        params.push(numbers("temperature", chat.temperature)?);
        params.push(numbers("top_p", chat.top_p)?);
        params.push(numbers("presence_penalty", chat.presence_penalty)?);
        params.push(numbers("frequency_penalty", chat.frequency_penalty)?);
        let max_tokens = per_item("params.chat_completion.max_tokens", chat.max_tokens, inputs)?;
        params.push((
            "max_tokens",
            max_tokens.into_iter().map(|v| v.map(Value::from)).collect(),
        ));
        let seed = per_item("params.chat_completion.seed", chat.seed, inputs)?;
        params.push(("seed", seed.into_iter().map(|v| v.map(Value::from)).collect()));
        Ok(Self {
            episode_ids: per_item("episode_ids", request.episode_ids.take(), inputs)?,
            tags: per_item("tags", request.tags.take(), inputs)?,
            output_schemas: per_item("output_schemas", request.output_schemas.take(), inputs)?,
            additional_tools: per_item("additional_tools", request.additional_tools.take(), inputs)?,
            allowed_tools: per_item("allowed_tools", request.allowed_tools.take(), inputs)?,
            tool_choice: per_item("tool_choice", request.tool_choice.take(), inputs)?,
            parallel_tool_calls: per_item("parallel_tool_calls", request.parallel_tool_calls.take(), inputs)?,
            params,
        })
    }

    /// Item `index`'s `/inference` request body (without its episode id and variant).
    fn item_body(&mut self, index: usize, function: &str, input: Value) -> Map<String, Value> {
        let mut body = Map::new();
        body.insert("function_name".into(), json!(function));
        body.insert("input".into(), input);
        body.insert("cache_options".into(), json!({"enabled": "off"}));
        let mut chat = Map::new();
        for (field, values) in &mut self.params {
            if let Some(value) = values.get_mut(index).and_then(Option::take) {
                chat.insert((*field).to_owned(), value);
            }
        }
        body.insert("params".into(), json!({ "chat_completion": chat }));
        let mut put = |field: &str, value: Option<Value>| {
            if let Some(value) = value {
                body.insert(field.to_owned(), value);
            }
        };
        put("tags", take(&mut self.tags, index).map(|t| json!(t)));
        put("output_schema", take(&mut self.output_schemas, index));
        put(
            "additional_tools",
            take(&mut self.additional_tools, index).map(Value::from),
        );
        put("allowed_tools", take(&mut self.allowed_tools, index).map(|t| json!(t)));
        put("tool_choice", take(&mut self.tool_choice, index));
        put(
            "parallel_tool_calls",
            take(&mut self.parallel_tool_calls, index).map(Value::from),
        );
        body
    }
}

fn take<T>(column: &mut [Option<T>], index: usize) -> Option<T> {
    column.get_mut(index).and_then(Option::take)
}

impl FunctionChecks {
    /// Check a `/batch_inference` request and split it into items: every list as long as
    /// `inputs`, one variant for the batch (drawn with the first episode id), every item checked
    /// as the worker will run it. Mints the inference ids and the missing episode ids.
    pub(crate) fn plan_batch(&self, mut request: BatchInferenceRequest) -> Result<PlannedBatch, FunctionError> {
        refuse(
            "model_name",
            request.model_name.take().is_some_and(|m| !m.is_null()),
            "batches run a function; name it in `function_name`",
        )?;
        refuse("stream", request.stream == Some(true), "results are polled")?;
        refuse(
            "dryrun",
            request.dryrun == Some(true),
            "every batch inference is stored",
        )?;
        let cache_on = request
            .cache_options
            .as_ref()
            .and_then(|c| c.get("enabled"))
            .and_then(Value::as_str)
            .is_some_and(|mode| mode != "off");
        refuse(
            "cache_options",
            cache_on,
            "batch inferences are neither read from nor written to the cache",
        )?;
        let function_name = request
            .function_name
            .take()
            .ok_or_else(|| FunctionError::invalid("missing field `function_name`"))?;
        let inputs = request
            .inputs
            .take()
            .ok_or_else(|| FunctionError::invalid("missing field `inputs`"))?;
        if inputs.is_empty() {
            return Err(FunctionError::invalid("`inputs` must not be empty"));
        }
        if inputs.len() > MAX_BATCH_INPUTS {
            return Err(FunctionError::invalid(format!(
                "`inputs` has {} entries; a batch holds at most {MAX_BATCH_INPUTS}",
                inputs.len()
            )));
        }
        let count = inputs.len();
        let mut columns = Columns::new(&mut request, count)?;
        let now_ms = self.now_ms();
        let batch_id = batch_base(self.new_id());
        let derived = |item: BatchItemId| {
            item.id()
                .ok_or_else(|| FunctionError::invalid(format!("`inputs` has too many entries ({count})")))
        };
        let mut episodes = Vec::with_capacity(count);
        for (index, given) in (0u32..).zip(columns.episode_ids.iter()) {
            let episode = match given {
                Some(text) => super::function_calls::parse_episode_id(text, now_ms).map_err(|e| {
                    FunctionError::invalid(format!("`episode_ids[{index}]` is not a valid episode id: {e}"))
                })?,
                None => derived(BatchItemId::episode(batch_id, index))?,
            };
            episodes.push(episode);
        }
        let first_episode = episodes.first().copied().unwrap_or_else(|| self.new_id());
        let variant = self.batch_variant(&function_name, request.variant_name.as_deref(), first_episode)?;
        let credentials = request.credentials.take().unwrap_or_default();
        let mut items = Vec::with_capacity(count);
        for (index, (input, episode_id)) in (0u32..).zip(inputs.into_iter().zip(episodes)) {
            let mut body = columns.item_body(index as usize, &function_name, input);
            body.insert("variant_name".into(), json!(variant.name));
            body.insert("episode_id".into(), json!(episode_id));
            let failed = |e: String| FunctionError::invalid(format!("Input at index {index} failed validation: {e}"));
            let body = Value::Object(body);
            let call = item_call(&body, now_ms, &credentials).map_err(|e| failed(e.to_string()))?;
            self.check_batch_item(&call).map_err(|e| failed(e.to_string()))?;
            let inference_id = derived(BatchItemId::inference(batch_id, index))?;
            let line = json!({"inference_id": inference_id, "request": body}).to_string();
            items.push(PlannedItem {
                inference_id,
                episode_id,
                line,
            });
        }
        Ok(PlannedBatch {
            batch_id,
            function_name,
            variant,
            credentials,
            items,
        })
    }
}

impl FunctionService {
    /// Run one stored item line (its JSON; `None`: it is not JSON) with the batch's credentials:
    /// its ids (when the line can be read) and the record to store, or why the item failed.
    pub(crate) async fn run_batch_line(
        &self,
        project: &ProjectId,
        item: Option<Value>,
        credentials: &HashMap<String, String>,
    ) -> (
        Option<ItemIds>,
        Result<crate::ports::inference_records::InferenceRecord, FunctionError>,
    ) {
        let ids = item.as_ref().and_then(item_ids);
        match stored_item_call(item, credentials) {
            Ok((ids, call)) => (Some(ids), self.infer_batch_item(project, &call, ids.inference_id).await),
            Err(e) => (ids, Err(e)),
        }
    }

    /// The model and neutral request a stored item line sends (for a provider's own batch API),
    /// or why it cannot be prepared (a worker run then reports it).
    pub(crate) fn batch_line_request(
        &self,
        item: &Value,
        credentials: &HashMap<String, String>,
    ) -> Result<crate::model::ModelRequest, FunctionError> {
        let (_, call) = stored_item_call(Some(item.clone()), credentials)?;
        self.batch_item_request(&call)
    }

    /// The record of a stored item line whose model answered `response` through `provider`'s
    /// own batch API.
    pub(crate) fn native_batch_line_record(
        &self,
        project: &ProjectId,
        item: Option<Value>,
        credentials: &HashMap<String, String>,
        provider: &str,
        response: crate::model::ModelResponse,
    ) -> (
        Option<ItemIds>,
        Result<crate::ports::inference_records::InferenceRecord, FunctionError>,
    ) {
        let ids = item.as_ref().and_then(item_ids);
        match stored_item_call(item, credentials) {
            Ok((ids, call)) => (
                Some(ids),
                self.native_batch_item_record(project, &call, ids.inference_id, provider, response),
            ),
            Err(e) => (ids, Err(e)),
        }
    }
}

/// A stored item line (its JSON; `None`: it is not JSON) as the call a worker makes, with its ids.
fn stored_item_call(
    item: Option<Value>,
    credentials: &HashMap<String, String>,
) -> Result<(ItemIds, InferenceCall), FunctionError> {
    let item = item.ok_or_else(|| FunctionError::invalid("the stored batch item cannot be read: it is not JSON"))?;
    let parsed: ItemLine = serde_json::from_value(item)
        .map_err(|e| FunctionError::invalid(format!("the stored batch item cannot be read: {e}")))?;
    let inference_id = parsed.inference_id;
    let mut call = parsed.request.into_call(i64::MAX, || inference_id)?;
    let ids = ItemIds {
        inference_id,
        episode_id: call.episode_id,
    };
    call.credentials = credentials.clone();
    Ok((ids, call))
}

/// An item body as the call a worker makes (the credentials are the batch's).
fn item_call(body: &Value, now_ms: i64, credentials: &HashMap<String, String>) -> Result<InferenceCall, FunctionError> {
    let request: InferenceRequest = serde_json::from_value(body.clone())
        .map_err(|e| FunctionError::invalid(bounded_serde_message(&e.to_string())))?;
    let mut call = request.into_call(now_ms, Uuid::now_v7)?;
    call.credentials = credentials.clone();
    Ok(call)
}

#[cfg(test)]
#[path = "batch_request_tests.rs"]
mod tests;
